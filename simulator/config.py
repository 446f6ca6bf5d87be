"""Configuration for the simulated vLLM engine."""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULING_POLICIES = ("fcfs", "priority")


@dataclass
class SimulatorConfig:
    """All knobs of the simulator; CLI flags map 1:1 onto these fields."""

    served_model_name: str = "sim-model"
    host: str = "127.0.0.1"
    port: int = 8000
    max_num_seqs: int = 8
    block_size: int = 16
    num_gpu_blocks: int = 2048
    max_model_len: int = 4096
    max_num_batched_tokens: int = 2048
    prefill_ms_per_token: float = 0.2
    decode_ms_per_token: float = 10.0
    batch_alpha: float = 0.02
    scheduling_policy: str = "fcfs"
    enable_prefix_caching: bool = True
    eos_probability: float = 0.0
    seed: int = 0
    max_num_queued_reqs: int = 0  # vLLM's admission limit (0: none): past it a request gets vLLM's 503
    fail_after_tokens: int = 0  # fault injection (0: off): a generation fails after this many tokens
    error_rate: float = 0.0  # fault injection: this share of generation requests is answered 500 at once
    latency_multiplier: float = 1.0  # fault injection: every modeled step takes this many times as long
    hang_after_first_byte: float = 0.0  # fault injection: this share of generation requests stalls after its first byte
    load_seconds: float = 0.0  # modeled model load: the port opens only after this long, as vLLM's does
    log_level: str = "warning"
    record_requests: str = ""  # a file: every generation request received is appended to it (tests)

    def __post_init__(self) -> None:
        """Reject configurations the engine could not run with."""
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ValueError(f"scheduling_policy must be one of {SCHEDULING_POLICIES}")
        for name in ("max_num_seqs", "block_size", "num_gpu_blocks", "max_model_len",
                     "max_num_batched_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if min(self.prefill_ms_per_token, self.decode_ms_per_token, self.batch_alpha, self.load_seconds) < 0:
            raise ValueError("timing parameters must be >= 0")
        if not 0.0 <= self.eos_probability <= 1.0:
            raise ValueError("eos_probability must be within [0, 1]")
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError("error_rate must be within [0, 1]")
        if not 0.0 <= self.hang_after_first_byte <= 1.0:
            raise ValueError("hang_after_first_byte must be within [0, 1]")
        if self.latency_multiplier <= 0:
            raise ValueError("latency_multiplier must be > 0")

    @property
    def zero_latency(self) -> bool:
        """True when modeled compute time is zero, so the engine never sleeps."""
        return self.prefill_ms_per_token == 0 and self.decode_ms_per_token == 0
