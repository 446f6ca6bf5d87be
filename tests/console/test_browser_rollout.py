"""A rollout in the browser: started from the form, watched live, rolled back — with the keyboard only.

The rollouts stepper (a Celery task) does not run here: the test plays its part through the same services
(begin_ramping) and writes the usage records the gateway would, so the page shows what it shows in production.
"""
import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from fleet.models import Instance
from fleet.states import InstanceState
from rollouts.models import Rollout, RolloutState
from tests.console.browser import screenshot, serious_violations, sign_in
from tests.console.conftest import make_version

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
NAVIGATION_MS = 60_000  # a hang guard: a form post and its redirect, on a loaded 2-core host, can take many seconds


@pytest.fixture
def world(world):
    if connection.vendor == "sqlite":  # its trigger stops the flush deleting the published version this test needs
        pytest.skip("needs PostgreSQL (TRUNCATE) to clean up a published model version")
    world.next_version = make_version(status="published")
    return world


def _new_version_serves(world, rollout):
    """What reconcile and the gateway would do: an engine of the new version, and requests on both versions."""
    from usage.services import record_usage_batch

    engine = Instance.objects.create(deployment=world.dep_a, model_version=rollout.to_version, ready_at=timezone.now(),
                                     state=InstanceState.READY, endpoint_url="http://127.0.0.1:8")
    old = world.dep_a.instances.exclude(pk=engine.pk).get()
    old.model_version = rollout.from_version
    old.save(update_fields=["model_version"])
    now = timezone.now()
    rows = [{"request_id": f"r-{version.pk}-{i}", "occurred_at": now, "tenant_id": world.a.pk,
             "api_key_prefix": "sy_test", "model_name": "console-coder", "model_version_id": version.pk,
             "instance_id": instance.pk, "endpoint": "completions", "status_code": 502 if bad else 200,
             "outcome": "upstream_error" if bad else "ok", "prompt_tokens": 10, "completion_tokens": 5,
             "ttft_ms": ttft, "latency_ms": 100.0, "redacted_prompt": "def f(): pass"}
            for version, instance, count, every, ttft in ((rollout.to_version, engine, 10, 5, 90.0),
                                                          (rollout.from_version, old, 40, 0, 60.0))
            for i in range(count) for bad in [bool(every) and i % every == 0]]
    record_usage_batch(rows)


def test_a_rollout_is_started_watched_and_rolled_back_with_the_keyboard(browser, live_server, world):
    from rollouts.services import begin_ramping

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    refused = []
    page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
    sign_in(page, live_server.url, "alice")
    page.goto(f"{live_server.url}{reverse('console:deployment', args=[world.dep_a.pk])}")
    link = page.get_by_role("link", name="Start or review rollouts")
    link.focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Start a rollout")).to_be_visible()

    page.get_by_label("To version").focus()
    page.keyboard.press("ArrowDown")  # the first (only) other published version
    page.get_by_label("Stages").focus()
    page.keyboard.type("0.1:600, 1:60")
    page.get_by_label("Minimum requests").focus()
    page.keyboard.press("Control+a")
    page.keyboard.type("5")
    page.get_by_role("button", name="Start rollout").focus()
    page.keyboard.press("Enter")
    expect(page.locator(".messages")).to_contain_text("Rollout started", timeout=NAVIGATION_MS)
    rollout = Rollout.objects.get(deployment=world.dep_a)
    assert (rollout.state, rollout.to_version, rollout.stages, rollout.gates["min_requests"]) == (
        RolloutState.PENDING, world.next_version,
        [{"weight": 0.1, "bake_seconds": 600}, {"weight": 1.0, "bake_seconds": 60}], 5)
    expect(page.locator("#rollout-status")).to_contain_text("Pending")

    # The stepper sees the new version warm: 10 % of traffic moves; the gateway records requests on both.
    begin_ramping(rollout, baseline={})
    _new_version_serves(world, rollout)
    # The live panel refreshes itself: the weights, the figures and the verdict (B fails at 20 % errors).
    expect(page.locator('[data-weight="B"]')).to_have_text("10.0 %", timeout=15_000)
    expect(page.locator("#rollout-verdict")).to_contain_text("fail")
    expect(page.locator("#rollout-figures")).to_contain_text("20.0 %")
    expect(page.locator("#rollout-stale")).to_be_visible()
    page.reload()
    assert page.locator("svg.chart polyline.chart-version-b").count() >= 1  # B's line on the A-vs-B charts
    expect(page.get_by_role("button", name="Promote now")).to_be_visible()
    screenshot(page, "rollout")

    checker = browser.new_context(bypass_csp=True).new_page()  # axe is injected past the CSP
    sign_in(checker, live_server.url, "alice")
    checker.goto(page.url)
    assert serious_violations(checker) == []

    page.get_by_role("button", name="Roll back").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_text("Rolled back: all traffic goes to the old version.")).to_be_visible(timeout=NAVIGATION_MS)
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.ROLLED_BACK and rollout.weight == 0
    expect(page.locator('[data-weight="B"]')).to_have_text("0.0 %")
    expect(page.locator("#rollout-history")).to_contain_text("Rolled back")
    expect(page.get_by_role("heading", name="Start a rollout")).to_be_visible()  # a new one may start
    assert refused == []
    context.close()
    checker.context.close()


def test_a_viewer_watches_a_rollout_without_its_buttons(browser, live_server, world):
    from tests.api.matrix_world import make_rollout

    versions = type("Versions", (), {"main": world.version, "next": world.next_version})
    make_rollout(world.dep_a, versions)
    context = browser.new_context()
    page = context.new_page()
    sign_in(page, live_server.url, "victor")
    page.goto(f"{live_server.url}{reverse('console:rollout', args=[world.dep_a.pk])}")
    expect(page.locator('[data-weight="B"]')).to_have_text("10.0 %")
    assert page.get_by_role("button").filter(has_text="Roll back").count() == 0
    assert page.get_by_role("heading", name="Start a rollout").count() == 0
    context.close()
