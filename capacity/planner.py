"""The capacity planner: how much KV cache fits, what to set in vLLM, how many replicas, what it costs.

Pure functions of their inputs (no database, no clock), so every figure is unit-tested against the
arithmetic. docs/capacity-planning.md states the model, its reserves and what it leaves out.
"""
import math
from dataclasses import asdict, dataclass, field
from decimal import Decimal

from capacity.architecture import Architecture

GIB = 1024 ** 3
HOURS_PER_MONTH = 730  # 365 × 24 / 12
# Memory each GPU keeps outside weights and KV cache: the activation peak of a max_num_batched_tokens
# forward pass, CUDA graphs, the CUDA context, NCCL and cuBLAS workspaces. vLLM measures it at
# start-up; 2 GiB is what a 7B model at 8k batched tokens typically leaves (overridable per plan).
DEFAULT_RESERVE_BYTES = 2 * GIB
DEFAULT_BLOCK_SIZE = 16  # vLLM's KV block size in tokens on CUDA and CPU
MAX_NUM_SEQS_CAP = 256  # vLLM's own default: beyond it decode steps get slow for every sequence
MIN_BATCHED_TOKENS, MAX_BATCHED_TOKENS = 2048, 8192


@dataclass(frozen=True)
class Gpu:
    """One accelerator type: memory and hourly price (None: no price in the table)."""

    name: str
    memory_bytes: int
    hourly_usd: Decimal | None = None


@dataclass(frozen=True)
class Traffic:
    """Demand to plan for: concurrent requests at peak (p99), typical request size, monthly volume."""

    developers: int
    peak_concurrency: float
    prompt_tokens: int
    completion_tokens: int
    completions_per_month: int
    source: str

    @property
    def tokens_per_request(self) -> int:
        return self.prompt_tokens + self.completion_tokens


# Seed practice: 50 developers → 8–12 requests in flight at the busiest minute; plan for the top (0.24).
SEED_CONCURRENCY_RATIO = 0.24
SEED_PROMPT_TOKENS = 1500  # an editor completion sends the file around the cursor
SEED_COMPLETION_TOKENS = 64
SEED_COMPLETIONS_PER_DEVELOPER_DAY = 300
WORKING_DAYS_PER_MONTH = 21


def seed_traffic(developers: int, *, concurrency_ratio: float = SEED_CONCURRENCY_RATIO,
                 prompt_tokens: int = SEED_PROMPT_TOKENS, completion_tokens: int = SEED_COMPLETION_TOKENS,
                 completions_per_developer_day: int = SEED_COMPLETIONS_PER_DEVELOPER_DAY) -> Traffic:
    """The default profile for `developers` IDE users, from the seed practice's ratios."""
    return Traffic(developers=developers, peak_concurrency=developers * concurrency_ratio,
                   prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                   completions_per_month=developers * completions_per_developer_day * WORKING_DAYS_PER_MONTH,
                   source=f"seed practice: {concurrency_ratio:g} of developers in flight at peak")


@dataclass(frozen=True)
class PlanInputs:
    architecture: Architecture
    context_length: int
    traffic: Traffic
    gpu: Gpu | None = None
    kv_space_bytes: int | None = None  # CPU engines: VLLM_CPU_KVCACHE_SPACE × 1 GiB replaces the GPU budget
    gpu_memory_utilization: float = 0.90
    reserve_bytes: int = DEFAULT_RESERVE_BYTES
    tensor_parallel_size: int = 1
    block_size: int = DEFAULT_BLOCK_SIZE
    redundancy: int = 1
    max_concurrency_per_replica: int | None = None  # a measured latency bound, if you have one


@dataclass(frozen=True)
class MemoryBudget:
    """Per GPU (or the CPU engine's KV space): what holds what, in bytes."""

    total: int
    usable: int
    weights: int
    reserve: int
    kv_cache: int


@dataclass(frozen=True)
class Plan:
    kv_bytes_per_token: int
    memory: MemoryBudget | None
    kv_space_bytes: int
    kv_tokens: int
    kv_blocks: int
    fits: bool
    max_sequences_at_context: float
    sequences_at_typical_length: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    concurrency_per_replica: int
    replicas_for_peak: int
    replicas: int
    gpus: int
    peak_utilization: float
    cost_per_month_usd: Decimal | None
    cost_per_completion_usd: Decimal | None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        data = asdict(self)
        for key in ("cost_per_month_usd", "cost_per_completion_usd"):
            data[key] = None if data[key] is None else str(data[key])
        return data


def memory_budget(inputs: PlanInputs) -> MemoryBudget | None:
    """Per GPU: memory × utilization − its share of the weights − the reserve (None on CPU)."""
    if inputs.kv_space_bytes is not None or inputs.gpu is None:
        return None
    total = inputs.gpu.memory_bytes
    usable = int(total * inputs.gpu_memory_utilization)
    weights = math.ceil(inputs.architecture.weight_bytes / inputs.tensor_parallel_size)
    kv = max(0, usable - weights - inputs.reserve_bytes)
    return MemoryBudget(total=total, usable=usable, weights=weights, reserve=inputs.reserve_bytes, kv_cache=kv)


def kv_capacity(kv_space_bytes: int, kv_bytes_per_token: int, block_size: int) -> tuple[int, int]:
    """(blocks, tokens) of a KV space: whole blocks only, as vLLM allocates it."""
    blocks = kv_space_bytes // (kv_bytes_per_token * block_size)
    return blocks, blocks * block_size


def max_sequences(kv_tokens: int, length: int, block_size: int) -> float:
    """Sequences of `length` tokens that fit at once (vLLM's "maximum concurrency" at start-up)."""
    return kv_tokens / (math.ceil(length / block_size) * block_size)


def recommended_max_num_seqs(sequences_at_typical: int) -> int:
    """As many as fit at the typical request size, capped; a multiple of 8 once past 8."""
    seqs = min(MAX_NUM_SEQS_CAP, sequences_at_typical)
    return max(1, seqs - seqs % 8 if seqs >= 8 else seqs)


def recommended_batched_tokens(kv_tokens: int, max_model_len: int, max_num_seqs: int) -> int:
    """The chunked-prefill budget per step: an eighth of the cache within [2048, 8192], a multiple of 256."""
    budget = min(MAX_BATCHED_TOKENS, max(MIN_BATCHED_TOKENS, kv_tokens // 8))
    budget -= budget % 256
    return max(budget, max_num_seqs)


def plan(inputs: PlanInputs) -> Plan:
    """Every figure of the plan from its inputs."""
    arch, traffic, notes = inputs.architecture, inputs.traffic, []
    per_token = arch.kv_bytes_per_token
    memory = memory_budget(inputs)
    if memory is not None:
        kv_space = memory.kv_cache * inputs.tensor_parallel_size
    else:
        kv_space = inputs.kv_space_bytes or 0
    blocks, kv_tokens = kv_capacity(kv_space, per_token, inputs.block_size)
    max_model_len = min(inputs.context_length, arch.max_positions or inputs.context_length)
    if max_model_len < inputs.context_length:
        notes.append(f"The model's max_position_embeddings ({arch.max_positions}) caps the context.")
    fits = kv_tokens >= max_model_len
    if not fits:
        notes.append(f"One {max_model_len}-token sequence needs more KV cache than fits ({kv_tokens} tokens): vLLM "
                     "would refuse to start. Use a larger GPU, tensor parallelism, quantization or a shorter context.")
    typical = max(1, min(traffic.tokens_per_request, max_model_len))
    at_typical = int(max_sequences(kv_tokens, typical, inputs.block_size))
    max_num_seqs = recommended_max_num_seqs(at_typical) if fits else 0
    per_replica = min(max_num_seqs, inputs.max_concurrency_per_replica or max_num_seqs)
    needed = max(1, math.ceil(traffic.peak_concurrency / per_replica)) if per_replica else 0
    replicas = needed + inputs.redundancy if needed else 0
    gpus = replicas * inputs.tensor_parallel_size
    monthly = _monthly_cost(inputs.gpu, gpus) if memory is not None else None
    return Plan(
        kv_bytes_per_token=per_token, memory=memory, kv_space_bytes=kv_space, kv_tokens=kv_tokens, kv_blocks=blocks,
        fits=fits, max_sequences_at_context=round(max_sequences(kv_tokens, max_model_len, inputs.block_size), 2),
        sequences_at_typical_length=at_typical, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=recommended_batched_tokens(kv_tokens, max_model_len, max_num_seqs) if fits else 0,
        concurrency_per_replica=per_replica, replicas_for_peak=needed, replicas=replicas, gpus=gpus,
        peak_utilization=round(traffic.peak_concurrency / (needed * per_replica), 3) if needed else 0.0,
        cost_per_month_usd=monthly, cost_per_completion_usd=_per_completion(monthly, traffic), notes=notes)


def _monthly_cost(gpu: Gpu | None, gpus: int) -> Decimal | None:
    if gpu is None or gpu.hourly_usd is None:
        return None
    return (gpu.hourly_usd * gpus * HOURS_PER_MONTH).quantize(Decimal("0.01"))


def _per_completion(monthly: Decimal | None, traffic: Traffic) -> Decimal | None:
    if monthly is None or traffic.completions_per_month <= 0:
        return None
    return (monthly / traffic.completions_per_month).quantize(Decimal("0.000001"))
