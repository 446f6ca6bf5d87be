"""The worked examples of docs/usage-and-cost.md, to the cent.

Shared pool: one H100 ($4.00/h) up the whole hour; requests cover 45 of its 60 minutes; tenant A did
3,000 units of engine work and tenant B 1,000. Busy $3.00 splits 3:1 (A $2.25, B $0.75); idle $1.00
splits the same way (A $0.75, B $0.25).
Dedicated: two A100-80G ($2.50/GPU-h, TP 2) up the last 30 minutes of the hour = 1 GPU-hour = $2.50;
one request keeps it busy 10 of those 30 minutes: $0.83 usage, $1.67 idle, all tenant A's.
"""
import importlib
from datetime import timedelta
from decimal import Decimal

import pytest
from django.apps import apps as django_apps

from fleet.models import Deployment, Instance
from models_registry.models import Model, ModelVersion
from tenants.models import Tenant
from tests.usage.events import BASE, at, event
from usage.cost.allocation import InstanceHour, allocate, busy_seconds, split
from usage.models import CostKind, CostRollup, Granularity, PriceUnit
from usage.rollups import roll_up_day, roll_up_hours
from usage.selectors import UsageQuery, cost_table
from usage.services import record_feedback, record_usage_batch

NOW = BASE + timedelta(hours=3)
CENT = Decimal("0.01")


def cents(value) -> Decimal:
    return Decimal(value).quantize(CENT)


@pytest.fixture
def version(db):
    model = Model.objects.create(name="qwen2.5-coder-7b")
    return ModelVersion.objects.create(model=model, version="1", artifact_uri="file:///models/q", quantization="awq")


def deployment(version, tenant, name, gpu_type, tp=1):
    return Deployment.objects.create(tenant=tenant, name=name, model_version=version, gpu_type=gpu_type,
                                     tensor_parallel_size=tp)


def instance(dep, starting_at, **ends):
    return Instance.objects.create(deployment=dep, state="ready", starting_at=starting_at,
                                   ready_at=starting_at + timedelta(minutes=1), **ends)


def shared_pool_traffic(tenant_a, tenant_b, inst, version):
    """A: 600 prompt (200 cached) + 300 out, and 400 + 250 out → work 1,600 + 1,400; B: 600 + 100 out → 1,000."""
    common = {"instance_id": inst.pk, "model_version_id": version.pk}
    return [
        event(tenant_a, at(minutes=20), prompt_tokens=600, cached_tokens=200, completion_tokens=300,
              latency_ms=1_200_000, request_id="a1", **common),  # busy 00:00-00:20
        event(tenant_a, at(minutes=30), prompt_tokens=400, completion_tokens=250, latency_ms=1_200_000,
              request_id="a2", **common),  # busy 00:10-00:30
        event(tenant_b, at(minutes=50), prompt_tokens=600, completion_tokens=100, latency_ms=900_000,
              request_id="b1", **common),  # busy 00:35-00:50
    ]


def _cost(tenant, kind, granularity=Granularity.HOUR) -> Decimal:
    rows = CostRollup.objects.filter(tenant=tenant, kind=kind, granularity=granularity)
    return cents(sum((row.cost_usd for row in rows), Decimal(0)))


def test_two_tenants_on_a_shared_pool_pay_by_engine_work(tenant_a, tenant_b, version):
    pool = deployment(version, None, "shared-h100", "H100")
    inst = instance(pool, BASE - timedelta(hours=1))
    record_usage_batch(shared_pool_traffic(tenant_a, tenant_b, inst, version))
    roll_up_hours(BASE, BASE + timedelta(hours=1), now=NOW)

    assert (_cost(tenant_a, CostKind.USAGE), _cost(tenant_a, CostKind.IDLE)) == (Decimal("2.25"), Decimal("0.75"))
    assert (_cost(tenant_b, CostKind.USAGE), _cost(tenant_b, CostKind.IDLE)) == (Decimal("0.75"), Decimal("0.25"))
    assert sum(row.cost_usd for row in CostRollup.objects.all()) == Decimal("4.000000")  # nothing lost or made up


def test_cost_per_completion_and_per_accepted_completion(tenant_a, tenant_b, version):
    pool = deployment(version, None, "shared-h100", "H100")
    inst = instance(pool, BASE - timedelta(hours=1))
    record_usage_batch(shared_pool_traffic(tenant_a, tenant_b, inst, version))
    record_feedback("a1", True, tenant=tenant_a)
    record_feedback("a2", False, tenant=tenant_a)
    roll_up_hours(BASE, BASE + timedelta(hours=1), now=NOW)
    roll_up_day(BASE, now=NOW)

    query = UsageQuery(tenant_ids=[tenant_a.pk], since=BASE, until=BASE + timedelta(days=1))
    [row] = cost_table(query, "tenant")
    assert row["tenant"]["slug"] == "tenant-a"
    assert cents(row["usage_cost_usd"]) == Decimal("2.25") and cents(row["idle_cost_usd"]) == Decimal("0.75")
    assert row["cost_per_completion_usd"] == "1.125000"  # $2.25 / 2 completions
    assert cents(row["total_cost_per_completion_usd"]) == Decimal("1.50")  # ($2.25 + $0.75) / 2
    assert cents(row["cost_per_1k_tokens_usd"]) == Decimal("1.45")  # $2.25 / 1,550 tokens × 1,000
    assert cents(row["cost_per_accepted_completion_usd"]) == Decimal("3.00")  # $3.00 / 1 accepted
    assert row["acceptance_ratio"] == 0.5


def test_dedicated_idle_capacity_is_the_owners(tenant_a, tenant_b, version):
    dedicated = deployment(version, tenant_a, "a-a100", "A100-80G", tp=2)
    inst = instance(dedicated, at(minutes=30))
    record_usage_batch([event(tenant_a, at(minutes=50), latency_ms=600_000, instance_id=inst.pk,
                              model_version_id=version.pk)])  # busy 00:40-00:50
    roll_up_hours(BASE, BASE + timedelta(hours=1), now=NOW)

    assert _cost(tenant_a, CostKind.USAGE) == Decimal("0.83")
    assert _cost(tenant_a, CostKind.IDLE) == Decimal("1.67")
    assert not CostRollup.objects.filter(tenant=tenant_b).exists()
    row = CostRollup.objects.get(tenant=tenant_a, kind=CostKind.IDLE)
    assert (row.deployment_id, row.quantization) == (dedicated.pk, "awq")


def test_an_unused_shared_pool_goes_to_the_unallocated_bucket(tenant_a, version):
    pool = deployment(version, None, "quiet-l4", "L4")
    instance(pool, BASE - timedelta(hours=1), stopped_at=at(minutes=45))
    roll_up_hours(BASE, BASE + timedelta(hours=1), now=NOW)

    [row] = CostRollup.objects.all()
    assert (row.tenant_id, row.kind, row.cost_usd) == (None, CostKind.IDLE, Decimal("0.600000"))  # 45 min × $0.80


def test_cpu_instances_are_priced_per_core_hour_and_counted_in_core_hours(tenant_a, version, settings):
    settings.SWITCHYARD_COST_CPU_CORES_PER_INSTANCE = 8
    dep = deployment(version, tenant_a, "a-cpu", "")
    instance(dep, BASE - timedelta(hours=1))
    gpu = deployment(version, tenant_a, "a-l4", "L4")
    instance(gpu, BASE + timedelta(minutes=30))
    roll_up_hours(BASE, BASE + timedelta(hours=1), now=NOW)
    roll_up_day(BASE, now=NOW)
    assert _cost(tenant_a, CostKind.IDLE) == Decimal("0.72")  # 8 cores × $0.04 + 30 min of an L4 at $0.80
    assert set(CostRollup.objects.values_list("deployment_id", "unit").distinct()) == {
        (dep.pk, PriceUnit.CPU_CORE), (gpu.pk, PriceUnit.GPU)}
    for granularity in (Granularity.HOUR, Granularity.DAY):
        [row] = cost_table(UsageQuery([tenant_a.pk], BASE, BASE + timedelta(days=1), granularity), "tenant")
        assert (row["gpu_hours"], row["cpu_core_hours"]) == ("0.500000", "8.000000")  # never added up


def test_cost_rows_written_before_units_were_kept_learn_theirs(db):
    migration = importlib.import_module("usage.migrations.0008_cost_rollup_unit")
    tenant = Tenant.objects.create(slug="old-rows", name="old rows")
    model = Model.objects.create(name="old-coder")
    old = ModelVersion.objects.create(model=model, version="1", artifact_uri="file:///m")
    cpu, h100 = deployment(old, tenant, "cpu", " CPU "), deployment(old, tenant, "h100", "H100")
    for dep in (cpu, h100):
        CostRollup.objects.create(granularity=Granularity.HOUR, period_start=BASE, tenant=tenant,
                                  deployment_id=dep.pk, kind=CostKind.IDLE, gpu_seconds=Decimal(3600))
    migration.mark_cpu_rows(django_apps, None)
    assert dict(CostRollup.objects.values_list("deployment_id", "unit")) == {
        cpu.pk: PriceUnit.CPU_CORE, h100.pk: PriceUnit.GPU}


def test_instances_still_up_are_charged_until_now(tenant_a, version):
    dep = deployment(version, tenant_a, "a-h100", "H100")
    instance(dep, BASE)
    roll_up_hours(BASE, BASE + timedelta(hours=1), now=at(minutes=15))
    assert _cost(tenant_a, CostKind.IDLE) == Decimal("1.00")  # 15 minutes of $4.00/h


def test_allocation_is_pure_and_conserves_money():
    hour = InstanceHour(deployment_id=1, owner_tenant_id=None, model_version_id=1, quantization="",
                        gpu_seconds=Decimal("3600"), cost_usd=Decimal("1.000000"), up_seconds=3600, busy_seconds=1800,
                        work_by_tenant={1: 1.0, 2: 1.0, 3: 1.0})
    shares = allocate(hour)
    assert sum(share.cost_usd for share in shares) == Decimal("1.000000")
    assert sum(share.gpu_seconds for share in shares) == Decimal("3600")
    assert sum(split(Decimal("0.10"), {"a": 1, "b": 1, "c": 1}).values()) == Decimal("0.10")


def test_busy_time_is_the_union_of_request_intervals():
    assert busy_seconds([(0, 1200), (600, 1800), (2100, 3000)], 0, 3600) == 2700
    assert busy_seconds([(-100, 50), (3500, 3700)], 0, 3600) == 150


def test_warm_time_is_idle_capacity_of_its_own_kind():
    """An instance warm for 45 of its 60 minutes, serving nothing: $0.75 warm, $0.25 idle."""
    from usage.cost.allocation import InstanceHour, allocate

    hour = InstanceHour(deployment_id=1, owner_tenant_id=7, model_version_id=3, quantization="none",
                        gpu_seconds=Decimal(3600), cost_usd=Decimal("1.00"), up_seconds=3600, busy_seconds=0,
                        warm_seconds=2700)
    shares = {share.kind: share for share in allocate(hour)}
    assert shares["warm"].cost_usd == Decimal("0.750000") and shares["idle"].cost_usd == Decimal("0.250000")
    assert shares["warm"].tenant_id == 7 and sum(s.cost_usd for s in shares.values()) == Decimal("1.00")
