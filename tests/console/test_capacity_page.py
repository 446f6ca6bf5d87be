"""The capacity page: a plan with its charts, GPU types (platform admins edit), advice for visible deployments."""
import json

import pytest
from django.urls import reverse

from audit.models import AuditEvent
from capacity.models import GpuType
from fleet.models import DemandSample
from tests.capacity.test_capacity_api import TINY_CONFIG, write_safetensors

PAGE = reverse("console:capacity")


@pytest.fixture
def model_dir(settings, tmp_path, world):
    """console-coder's files where the registry looks (its artifact_uri is `console-coder`)."""
    settings.SWITCHYARD_MODEL_ROOT = tmp_path
    (tmp_path / "console-coder").mkdir()
    (tmp_path / "console-coder" / "config.json").write_text(json.dumps({**TINY_CONFIG, "torch_dtype": "bfloat16"}))
    write_safetensors(tmp_path / "console-coder" / "model.safetensors", {"embed": [3072, 128]})
    return tmp_path / "console-coder"


def test_a_plan_renders_its_figures_and_two_charts(login, world, model_dir):
    page = login("alice").get(PAGE, {"model_version": world.version.pk, "gpu_type": "L4", "developers": 50,
                                     "traffic": "seed", "concurrency_ratio": 0.24, "prompt_tokens": 1500,
                                     "completion_tokens": 64, "gpu_memory_utilization": 0.9, "redundancy": 1})
    assert page.status_code == 200
    html = page.content.decode()
    assert "console-coder@" in html and "on L4" in html
    assert f"{2 * 2 * 1 * 64 * 2:,} bytes" in html  # KV per token: bf16, 2 layers, 1 KV head of 64
    assert html.count('role="img"') == 2
    assert "Memory of one GPU (GiB)" in html and "Requests in flight: demand and capacity" in html
    assert "<script" not in html.split("</main>")[0].split("<main")[-1]  # charts are SVG, no script


def test_a_cpu_engine_needs_its_kv_space(login, world, model_dir):
    html = login("alice").get(PAGE, {"model_version": world.version.pk, "gpu_type": "cpu", "developers": 5,
                                     "traffic": "seed", "concurrency_ratio": 0.24, "prompt_tokens": 100,
                                     "completion_tokens": 10, "gpu_memory_utilization": 0.9,
                                     "redundancy": 1}).content.decode()
    assert "A CPU engine needs its KV space." in html and 'role="img"' not in html


def test_a_version_without_a_readable_config_is_a_form_error(login, world, settings, tmp_path):
    settings.SWITCHYARD_MODEL_ROOT = tmp_path
    html = login("alice").get(PAGE, {"model_version": world.version.pk, "gpu_type": "L4", "developers": 5,
                                     "traffic": "seed", "concurrency_ratio": 0.24, "prompt_tokens": 100,
                                     "completion_tokens": 10, "gpu_memory_utilization": 0.9,
                                     "redundancy": 1}).content.decode()
    assert "does not exist" in html and 'role="img"' not in html


def test_tenant_b_usage_is_a_404_and_advice_covers_only_visible_deployments(login, world, model_dir):
    client = login("alice")
    assert client.get(PAGE, {"model_version": world.version.pk, "gpu_type": "L4", "traffic": "usage",
                             "tenant": "tenant-b"}).status_code == 404
    DemandSample.objects.create(deployment=world.dep_a, at=world.dep_a.created_at, serving=1)
    html = client.get(PAGE).content.decode()
    assert "tenant-a/coder-a" in html and "coder-b" not in html


def test_who_may_open_the_page(login, world):
    assert login("dave").get(PAGE).status_code == 404  # auditors do not read the registry
    assert login("victor").get(PAGE).status_code == 200
    assert "Capacity" in login("erin").get(reverse("console:home")).content.decode()


def test_only_platform_admins_add_and_remove_gpu_types(login, world):
    add = reverse("console:gpu-type-create")
    assert login("alice").post(add, {"name": "B200", "memory_mib": 183359}).status_code == 403
    assert "Add a GPU type" not in login("alice").get(PAGE).content.decode()
    staff = login("charlie")
    assert staff.post(add, {"name": "B200", "memory_mib": 183359, "note": "ours"}).status_code == 302
    duplicate = staff.post(add, {"name": "b200", "memory_mib": 2048})
    assert duplicate.status_code == 200 and "exists already" in duplicate.content.decode()
    b200 = GpuType.objects.get(name="B200")
    assert login("alice").post(reverse("console:gpu-type-delete", args=[b200.pk])).status_code == 403
    assert staff.post(reverse("console:gpu-type-delete", args=[b200.pk])).status_code == 302
    assert not GpuType.objects.filter(name="B200").exists()
    assert list(AuditEvent.objects.filter(action__startswith="capacity.").values_list("action", flat=True)) == [
        "capacity.gpu_type.create", "capacity.gpu_type.delete"]
