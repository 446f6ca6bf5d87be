"""/api/v1/capacity/: GPU types (platform admins edit, audited), plans from a registered version, and advice.

Tenant isolation: a plan from usage history or advice for tenant B's deployment is a 404 for alice.
"""
import json
import struct
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from audit.models import AuditEvent
from capacity.models import GpuType
from fleet.models import DemandSample, Deployment, Instance
from fleet.states import InstanceState
from models_registry.models import Model, ModelVersion
from tests.conftest import bearer
from tests.usage.events import event
from usage.services import record_usage_batch

PLANS = "/api/v1/capacity/plans/"
GPU_TYPES = "/api/v1/capacity/gpu-types/"
TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
               "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
               "vocab_size": 3072, "intermediate_size": 256, "max_position_embeddings": 2048,
               "torch_dtype": "float32"}


def write_safetensors(path, tensors: dict[str, list[int]]) -> int:
    """A safetensors file of float32 zeros with these shapes; returns its data bytes."""
    header, offset = {}, 0
    for name, shape in tensors.items():
        size = 4
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)
    return offset


@pytest.fixture
def version(settings, tmp_path, db):
    settings.SWITCHYARD_MODEL_ROOT = tmp_path
    model_dir = tmp_path / "tiny"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(TINY_CONFIG))
    write_safetensors(model_dir / "model.safetensors", {"embed": [3072, 128], "layer0": [128, 256]})
    model = Model.objects.create(name="tiny")
    return ModelVersion.objects.create(model=model, version="v1", artifact_uri="tiny", dtype="float32",
                                       engine_args={"max_model_len": 1024})


@pytest.fixture
def staff(charlie):
    client = APIClient()
    client.force_authenticate(charlie.user)
    return client


def deployment_of(tenant, version, name):
    deployment = Deployment.objects.create(tenant=tenant, name=name, model_version=version,
                                           runtime_backend="simulator", routing_policy="round_robin")
    Instance.objects.create(deployment=deployment, state=InstanceState.READY, ready_at=timezone.now(),
                            metrics={"prefix_cache_hits": 1000.0, "prefix_cache_queries": 40000.0})
    return deployment


def test_a_plan_for_a_registered_version_reads_its_config_and_weights(alice, version):
    body = bearer(alice.key).post(PLANS, {"model_version": version.pk, "gpu_type": "l4", "developers": 50},
                                  format="json")
    assert body.status_code == 200, body.content
    plan = body.json()
    assert plan["model"]["kv_dtype_bytes"] == 4  # the version runs float32
    assert plan["plan"]["kv_bytes_per_token"] == 2 * 2 * 1 * 64 * 4
    assert plan["model"]["parameters"] == 3072 * 128 + 128 * 256
    assert plan["model"]["weights_source"] == "safetensors headers"
    assert plan["settings"]["context_length"] == 1024  # the version's max_model_len
    assert plan["gpu"] == {"name": "L4", "memory_bytes": 23034 * 1024 * 1024, "hourly_usd": "0.8000"}
    assert plan["traffic"]["peak_concurrency"] == 12.0
    assert plan["plan"]["replicas"] == 2 and plan["plan"]["cost_per_month_usd"] == "1168.00"


def test_a_cpu_engine_plan_takes_its_kv_space(alice, version):
    plan = bearer(alice.key).post(PLANS, {"model_version": version.pk, "kv_space_gib": 1}, format="json").json()
    assert plan["gpu"] is None and plan["plan"]["memory"] is None
    assert plan["plan"]["kv_tokens"] == 1024 ** 3 // 1024
    assert plan["plan"]["max_sequences_at_context"] == 1024.0
    assert plan["plan"]["cost_per_month_usd"] is None


def test_a_pasted_config_is_planned_without_registering_it(alice):
    config = {**TINY_CONFIG, "torch_dtype": "bfloat16"}
    plan = bearer(alice.key).post(PLANS, {"config": config, "name": "what-if", "gpu_type": "H100",
                                          "context_length": 2048}, format="json").json()
    assert plan["model"]["name"] == "what-if" and plan["model"]["weights_source"] == "config estimate"
    assert plan["plan"]["kv_bytes_per_token"] == 2 * 2 * 1 * 64 * 2


@pytest.mark.parametrize("body, field", [
    ({"gpu_type": "L4", "context_length": 1024}, "model_version"),
    ({"config": TINY_CONFIG, "model_version": 1, "gpu_type": "L4"}, "model_version"),
    ({"config": TINY_CONFIG, "context_length": 1024}, "gpu_type"),
    ({"config": TINY_CONFIG, "gpu_type": "L4"}, "context_length"),
    ({"config": TINY_CONFIG, "gpu_type": "TPU-v9", "context_length": 1024}, "gpu_type"),
    ({"config": {"hidden_size": 128}, "gpu_type": "L4", "context_length": 1024}, "config"),
    ({"config": TINY_CONFIG, "gpu_type": "L4", "context_length": 1024, "gpu_memory_utilization": 1.5},
     "gpu_memory_utilization"),
    ({"config": TINY_CONFIG, "gpu_type": "L4", "context_length": 1024, "developers": 0}, "developers"),
])
def test_bad_input_is_a_400_naming_the_field(alice, version, body, field):
    answer = bearer(alice.key).post(PLANS, body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()


def test_a_version_stored_remotely_asks_for_its_config(alice, version):
    remote = ModelVersion.objects.create(model=version.model, version="v2", artifact_uri="hf://org/repo@abc")
    answer = bearer(alice.key).post(PLANS, {"model_version": remote.pk, "gpu_type": "L4"}, format="json")
    assert answer.status_code == 400 and "config" in answer.json()["model_version"][0]


def test_a_plan_from_the_tenant_s_usage_history(alice, bob, version):
    now = timezone.now()
    record_usage_batch([event(alice.tenant, now - timedelta(seconds=i), latency_ms=3000.0, user_id=i % 4,
                              prompt_tokens=800, completion_tokens=40) for i in range(40)]
                       + [event(bob.tenant, now, latency_ms=60_000.0)])
    plan = bearer(alice.key).post(PLANS, {"model_version": version.pk, "gpu_type": "L4", "traffic": "usage",
                                          "tenant": "tenant-a"}, format="json").json()
    assert plan["traffic"]["developers"] == 4
    assert plan["traffic"]["peak_concurrency"] == 3.0  # 3 s requests, one a second
    assert (plan["traffic"]["prompt_tokens"], plan["traffic"]["completion_tokens"]) == (800, 40)
    assert "tenant tenant-a" in plan["traffic"]["profile"]


def test_tenant_b_s_usage_and_deployment_are_a_404(alice, bob, version):
    client = bearer(alice.key)
    body = {"model_version": version.pk, "gpu_type": "L4", "traffic": "usage"}
    assert client.post(PLANS, {**body, "tenant": "tenant-b"}, format="json").status_code == 404
    theirs = deployment_of(bob.tenant, version, "coder-b")
    assert client.post(PLANS, {**body, "deployment": theirs.pk}, format="json").status_code == 404
    assert client.post(PLANS, body, format="json").status_code == 400  # a tenant must be named
    assert client.get(f"/api/v1/capacity/advice/{theirs.pk}/").status_code == 404


def test_usage_history_with_no_requests_is_a_400(alice, version):
    answer = bearer(alice.key).post(PLANS, {"model_version": version.pk, "gpu_type": "L4", "traffic": "usage",
                                            "tenant": "tenant-a"}, format="json")
    assert answer.status_code == 400 and "traffic" in answer.json()


def test_advice_reads_the_deployment_s_samples_and_cache_counters(alice, version):
    mine = deployment_of(alice.tenant, version, "coder-a")
    Instance.objects.create(deployment=mine, state=InstanceState.READY, ready_at=timezone.now(), metrics={})
    now = timezone.now()
    DemandSample.objects.bulk_create([DemandSample(deployment=mine, at=now - timedelta(seconds=10 * i), serving=2,
                                                   waiting=0, running=0, kv_cache_usage=0.01) for i in range(6)])
    body = bearer(alice.key).get(f"/api/v1/capacity/advice/{mine.pk}/").json()
    assert body["samples"] == 6 and body["prefix_cache_hit_ratio"] == 0.025
    assert [a["code"] for a in body["advice"]] == ["enable_prefix_affinity", "fewer_replicas"]


def test_gpu_types_are_seeded_and_priced_from_the_price_table(alice):
    rows = {row["name"]: row for row in bearer(alice.key).get(GPU_TYPES).json()}
    assert {"L4", "A10G", "L40S", "A100-40G", "A100-80G", "H100", "H200"} <= set(rows)
    assert rows["L40S"]["hourly_usd"] == "1.9000" and rows["H100"]["memory_mib"] == 81559


def test_only_platform_admins_edit_gpu_types_and_each_edit_is_audited(alice, staff):
    assert bearer(alice.key).post(GPU_TYPES, {"name": "B200", "memory_mib": 183359}, format="json").status_code == 403
    created = staff.post(GPU_TYPES, {"name": "B200", "memory_mib": 183359, "note": "example"}, format="json")
    assert created.status_code == 201, created.content
    pk = created.json()["id"]
    assert created.json()["hourly_usd"] is None  # no price yet: plans on it show no cost
    assert staff.post(GPU_TYPES, {"name": "b200", "memory_mib": 1024}, format="json").status_code == 400
    assert bearer(alice.key).patch(f"{GPU_TYPES}{pk}/", {"memory_mib": 2048}, format="json").status_code == 403
    changed = staff.patch(f"{GPU_TYPES}{pk}/", {"memory_mib": 190000}, format="json")
    assert changed.status_code == 200 and changed.json()["memory_mib"] == 190000
    assert staff.delete(f"{GPU_TYPES}{pk}/").status_code == 204
    assert not GpuType.objects.filter(pk=pk).exists()
    actions = list(AuditEvent.objects.filter(action__startswith="capacity.gpu_type").values_list("action", flat=True))
    assert actions == ["capacity.gpu_type.create", "capacity.gpu_type.update", "capacity.gpu_type.delete"]


def test_anonymous_callers_are_refused(api):
    assert api.get(GPU_TYPES).status_code == 401
    assert api.post(PLANS, {}, format="json").status_code == 401
