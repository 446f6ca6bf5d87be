"""The capacity page in headless Chromium: a plan filled in and sent with the keyboard, its charts drawn
within the CSP, a GPU type added by a platform admin, and no serious accessibility violations."""
import importlib
import json

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from tests.capacity.test_capacity_api import TINY_CONFIG, write_safetensors
from tests.console.browser import screenshot, serious_violations, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
QWEN_LIKE = {**TINY_CONFIG, "torch_dtype": "bfloat16"}


def ensure_seeded_gpu_types() -> None:
    """The GPU types of capacity migration 0001: after a live-server test the migrations' rows are not restored
    (neither are usage's default GPU prices), so each test makes sure they are there, through the service."""
    from capacity.models import GpuType
    from capacity.services import create_gpu_type
    from tests.factories import SYSTEM

    for name, mib in importlib.import_module("capacity.migrations.0001_gpu_types").GPU_TYPES:
        if not GpuType.objects.filter(name=name).exists():
            create_gpu_type(name=name, memory_mib=mib, note="example default", actor=SYSTEM)


@pytest.fixture
def world(world, settings, tmp_path):
    ensure_seeded_gpu_types()
    settings.SWITCHYARD_MODEL_ROOT = tmp_path  # the live server runs in this process: it reads the same setting
    model_dir = tmp_path / "console-coder"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(QWEN_LIKE))
    write_safetensors(model_dir / "model.safetensors", {"embed": [3072, 128], "mlp": [128, 256]})
    return world


@pytest.fixture
def page_for(browser, live_server, world):
    contexts = []

    def open_as(username: str, **options):
        context = browser.new_context(viewport={"width": 1280, "height": 900}, **options)
        contexts.append(context)
        page = context.new_page()
        sign_in(page, live_server.url, username)
        return page

    yield open_as
    for context in contexts:
        context.close()


def test_a_plan_made_with_the_keyboard_draws_its_charts_within_the_csp(page_for, live_server, world):
    page = page_for("alice")
    refused = []
    page.on("console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text
            else None)
    page.get_by_role("link", name="Capacity").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Capacity planning", level=1)).to_be_visible()

    plan = page.locator("#plan-form")
    plan.get_by_label("Model version").focus()
    page.keyboard.press("ArrowDown")  # the first choice after the empty one: console-coder's version
    plan.get_by_label("GPU type").focus()
    page.keyboard.type("L4")  # a select takes typed letters
    plan.get_by_label("Developers").focus()
    page.keyboard.press("Control+A")
    page.keyboard.type("200")
    page.keyboard.press("Enter")  # submits the form

    expect(page.get_by_role("heading", name=f"{world.version} on L4")).to_be_visible()
    memory = page.get_by_role("img", name="Memory of one GPU (GiB)")
    expect(memory).to_be_visible()
    expect(memory.locator("rect.chart-bar")).to_have_count(4)
    demand = page.get_by_role("img", name="Requests in flight: demand and capacity")
    expect(demand).to_be_visible()
    expect(demand.locator("desc")).to_contain_text("In flight at peak: 48 requests")  # 200 × 0.24
    figures = page.locator("#plan-figures")
    expect(figures.get_by_role("row", name="KV cache per token")).to_contain_text(f"{2 * 2 * 1 * 64 * 2:,} bytes")
    expect(figures.get_by_role("row", name="--max-num-seqs")).to_contain_text("256")
    assert "developers=200" in page.url  # the plan is a link: bookmark it, send it
    assert refused == []
    screenshot(page, "capacity")


def test_a_platform_admin_adds_a_gpu_type_and_plans_on_it(page_for, live_server, world):
    page = page_for("charlie")
    page.goto(f"{live_server.url}{reverse('console:capacity')}")
    form = page.locator("form", has=page.get_by_role("button", name="Add GPU type"))
    form.get_by_label("Name").fill("B200")
    form.get_by_label("Memory (MiB)").fill("183359")
    form.get_by_label("Note").fill("ours")
    form.get_by_label("Note").press("Enter")
    expect(page.get_by_role("status")).to_contain_text("GPU type B200 added.")
    expect(page.locator("#gpu-types").get_by_role("row", name="B200")).to_contain_text("no price")
    page.locator("#plan-form").get_by_label("Model version").select_option(str(world.version.pk))
    page.locator("#plan-form").get_by_label("GPU type").select_option("B200")
    page.get_by_role("button", name="Plan").click()
    expect(page.get_by_role("heading", name=f"{world.version} on B200")).to_be_visible()
    expect(page.locator("#plan-figures").get_by_role("row", name="Cost per month")).to_contain_text("—")


def test_the_capacity_page_has_no_serious_accessibility_violations(page_for, live_server, world):
    page = page_for("charlie", bypass_csp=True)
    page.goto(f"{live_server.url}{reverse('console:capacity')}?model_version={world.version.pk}&gpu_type=H100"
              "&developers=50&traffic=seed&concurrency_ratio=0.24&prompt_tokens=1500&completion_tokens=64"
              "&gpu_memory_utilization=0.9&redundancy=1")
    expect(page.get_by_role("img", name="Memory of one GPU (GiB)")).to_be_visible()
    assert serious_violations(page) == []
