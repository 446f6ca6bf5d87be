"""manage.py plan_capacity: how many GPUs (or how much CPU KV space) a model needs for N developers.

    manage.py plan_capacity --model qwen2.5-coder-7b --gpu L4 --developers 50
    manage.py plan_capacity --config path/to/config.json --gpu A100-80G --context 16384 --json
    manage.py plan_capacity --model-version 3 --kv-space-gib 1            # a CPU engine
    manage.py plan_capacity --model-version 3 --gpu H100 --traffic usage --tenant acme
    manage.py plan_capacity --advise 12                                  # advice for deployment 12

Arguments are checked by the REST API's serializer, so both refuse the same input with the same words.
Run by an operator on the install: usage history of any tenant may be read.
"""
import json
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from capacity import selectors
from capacity.api.serializers import BLOCK_SIZES, PlanRequestSerializer
from fleet.models import Deployment
from models_registry.models import ModelVersion
from tenants.models import Tenant

GIB = 1024 ** 3


def _gib(value: int | None) -> str:
    return "—" if value is None else f"{value / GIB:,.2f} GiB"


class Command(BaseCommand):
    help = "Plan KV cache, vLLM settings, replicas and cost for a model, a GPU type and a number of developers."

    def add_arguments(self, parser):
        model = parser.add_argument_group("model (one)")
        model.add_argument("--model-version", type=int, help="A registered version's id.")
        model.add_argument("--model", help="A registered model's name: its newest version (or NAME@VERSION).")
        model.add_argument("--config", type=Path, help="A config.json file (weights estimated from it).")
        model.add_argument("--dtype", help="dtype for --config (default: its torch_dtype).")
        model.add_argument("--quantization", help="awq, gptq, fp8 or none, for --config.")
        where = parser.add_argument_group("where (one)")
        where.add_argument("--gpu", help="A GPU type's name (manage the table at /console/capacity/).")
        where.add_argument("--kv-space-gib", type=float, help="A CPU engine's VLLM_CPU_KVCACHE_SPACE.")
        demand = parser.add_argument_group("demand")
        demand.add_argument("--context", type=int, dest="context_length", help="max_model_len to plan for.")
        demand.add_argument("--developers", type=int)
        demand.add_argument("--concurrency-ratio", type=float, help="In flight at peak per developer (0.24).")
        demand.add_argument("--prompt-tokens", type=int)
        demand.add_argument("--completion-tokens", type=int)
        demand.add_argument("--traffic", choices=["seed", "usage"], default="seed")
        demand.add_argument("--tenant", help="--traffic usage: this tenant's requests (default: every tenant).")
        demand.add_argument("--deployment", type=int, help="--traffic usage: this deployment's requests.")
        demand.add_argument("--history-days", type=int)
        engine = parser.add_argument_group("engine")
        engine.add_argument("--gpu-memory-utilization", type=float)
        engine.add_argument("--reserve-gib", type=float, help="Activation / CUDA graph reserve per GPU (2).")
        engine.add_argument("--tp", type=int, dest="tensor_parallel_size", help="Tensor-parallel GPUs per replica.")
        engine.add_argument("--block-size", type=int, choices=BLOCK_SIZES)
        engine.add_argument("--redundancy", type=int, help="Spare replicas beyond peak (1: N+1).")
        engine.add_argument("--max-concurrency-per-replica", type=int)
        parser.add_argument("--json", action="store_true", help="Print the plan as JSON (the API's answer).")
        parser.add_argument("--advise", type=int, metavar="DEPLOYMENT",
                            help="Print advice for a deployment from its live figures instead of a plan.")

    def handle(self, *args, **options):
        if options["advise"] is not None:
            return self._advise(options["advise"], as_json=options["json"])
        data = self._validated(self._request(options))
        scope = self._scope(data)
        try:
            document = selectors.make_plan(data, scope=scope)
        except ValidationError as exc:
            raise CommandError(_sentence(exc.message_dict if hasattr(exc, "message_dict") else exc.messages)) from None
        self.stdout.write(json.dumps(document, indent=2) if options["json"] else render(document))

    def _request(self, options) -> dict:
        names = ["model_version", "config", "dtype", "quantization", "context_length", "developers",
                 "concurrency_ratio", "prompt_tokens", "completion_tokens", "traffic", "tenant", "deployment",
                 "history_days", "gpu_memory_utilization", "reserve_gib", "tensor_parallel_size", "block_size",
                 "redundancy", "max_concurrency_per_replica", "kv_space_gib"]
        request = {name: options[name] for name in names if options.get(name) is not None}
        if options.get("gpu"):
            request["gpu_type"] = options["gpu"]
        if options.get("model"):
            request["model_version"] = self._version_named(options["model"]).pk
        if "config" in request:
            request["config"], request["name"] = self._config(request["config"]), request["config"].parent.name
        return request

    def _version_named(self, text: str) -> ModelVersion:
        name, _, label = text.partition("@")
        versions = ModelVersion.objects.filter(model__name=name).order_by("-created_at")
        version = versions.filter(version=label).first() if label else versions.first()
        if version is None:
            raise CommandError(f"No registered version {text!r}.")
        return version

    def _config(self, path: Path) -> dict:
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CommandError(f"--config {path}: {exc}") from None
        if not isinstance(config, dict):
            raise CommandError(f"--config {path}: not a JSON object.")
        return config

    def _validated(self, request: dict) -> dict:
        payload = PlanRequestSerializer(data=request)
        if not payload.is_valid():
            raise CommandError(_sentence(payload.errors))
        data = dict(payload.validated_data)
        if "gpu_type" in data:
            try:
                data["gpu_type"] = selectors.gpu_type_named(data["gpu_type"])
            except ValidationError as exc:
                raise CommandError(_sentence(exc.message_dict)) from None
        return data

    def _scope(self, data: dict) -> selectors.TrafficScope | None:
        if data.get("traffic") != "usage":
            return None
        if data.get("deployment") is not None:
            deployment = Deployment.objects.filter(pk=data["deployment"]).first()
            if deployment is None:
                raise CommandError(f"No deployment {data['deployment']}.")
            return selectors.TrafficScope(label=f"deployment {deployment}", deployment=deployment)
        if data.get("tenant"):
            tenant = Tenant.objects.filter(slug=data["tenant"]).first()
            if tenant is None:
                raise CommandError(f"No tenant {data['tenant']!r}.")
            return selectors.TrafficScope(label=f"tenant {tenant.slug}", tenant_ids=[tenant.pk])
        return selectors.TrafficScope(label="the whole install")

    def _advise(self, deployment_id: int, *, as_json: bool) -> None:
        deployment = Deployment.objects.select_related("model_version__model").filter(pk=deployment_id).first()
        if deployment is None:
            raise CommandError(f"No deployment {deployment_id}.")
        found = selectors.deployment_advice(deployment)
        if as_json:
            self.stdout.write(json.dumps(found, indent=2))
            return
        ratio = found["prefix_cache_hit_ratio"]
        self.stdout.write(f"{deployment}: {found['samples']} samples in the last {found['window_seconds'] // 60} min, "
                          f"prefix-cache hit ratio {'—' if ratio is None else f'{ratio:.0%}'}")
        for item in found["advice"] or [{"severity": "ok", "title": "Nothing to change", "detail": ""}]:
            self.stdout.write(f"  [{item['severity']}] {item['title']}. {item['detail']}".rstrip())


def _sentence(errors) -> str:
    if isinstance(errors, dict):
        return "; ".join(f"{field}: {' '.join(map(str, messages)) if isinstance(messages, list) else messages}"
                         for field, messages in errors.items())
    return " ".join(map(str, errors))


def render(document: dict) -> str:
    """The plan as aligned rows, section by section."""
    model, gpu, traffic, plan = document["model"], document["gpu"], document["traffic"], document["plan"]
    memory = plan["memory"]
    rows = [
        ("Model", ""),
        ("  name", model["name"]),
        ("  layers × KV heads × head dim", f"{model['layers']} × {model['kv_heads']} × {model['head_dim']}"),
        ("  KV bytes per element", str(model["kv_dtype_bytes"])),
        ("  parameters / weights", f"{model['parameters'] / 1e9:,.2f} B / {_gib(model['weight_bytes'])} "
                                   f"({model['weights_source']})"),
        ("Where", ""),
        ("  GPU", "CPU engine (KV space given)" if gpu is None else
         f"{gpu['name']}, {_gib(gpu['memory_bytes'])}, "
         f"{'no price' if gpu['hourly_usd'] is None else '$' + gpu['hourly_usd'] + '/h'}"),
    ]
    if memory is not None:
        rows += [("  usable (× utilization)", _gib(memory["usable"])), ("  weights per GPU", _gib(memory["weights"])),
                 ("  reserve", _gib(memory["reserve"])), ("  KV cache per GPU", _gib(memory["kv_cache"]))]
    rows += [
        ("Traffic", traffic["profile"]),
        ("  developers / in flight at peak", f"{traffic['developers']} / {traffic['peak_concurrency']:g}"),
        ("  tokens per request", f"{traffic['prompt_tokens']} prompt + {traffic['completion_tokens']} completion"),
        ("  completions per month", f"{traffic['completions_per_month']:,}"),
        ("Plan", ""),
        ("  KV cache per token", f"{plan['kv_bytes_per_token']:,} B"),
        ("  KV cache per replica", f"{_gib(plan['kv_space_bytes'])}: {plan['kv_tokens']:,} tokens "
                                   f"({plan['kv_blocks']:,} blocks)"),
        ("  sequences at max_model_len", f"{plan['max_sequences_at_context']:g}"),
        ("  sequences at typical size", str(plan["sequences_at_typical_length"])),
        ("  --max-model-len", str(plan["max_model_len"])),
        ("  --max-num-seqs", str(plan["max_num_seqs"])),
        ("  --max-num-batched-tokens", str(plan["max_num_batched_tokens"])),
        ("  replicas (peak + redundancy)", f"{plan['replicas']} ({plan['replicas_for_peak']} + "
                                           f"{plan['replicas'] - plan['replicas_for_peak']}), {plan['gpus']} GPUs"),
        ("  peak utilization", f"{plan['peak_utilization']:.0%}"),
        ("  cost per month", "—" if plan["cost_per_month_usd"] is None else f"${plan['cost_per_month_usd']}"),
        ("  cost per completion", "—" if plan["cost_per_completion_usd"] is None
         else f"${plan['cost_per_completion_usd']}"),
    ]
    width = max(len(label) for label, _ in rows) + 2
    lines = [f"{label:<{width}}{value}".rstrip() for label, value in rows]
    return "\n".join(lines + [f"note: {note}" for note in plan["notes"]])
