"""Traffic sent through the real gateway shows up on the overview's default view, the usage chart and the
cost table at once, before any rollup has run, and the same after it."""
import time
from datetime import datetime
from datetime import timezone as dt_timezone
from decimal import Decimal

import httpx
import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from tests.console.browser import chromium, screenshot, sign_in
from tests.factories import SYSTEM, make_key
from tests.gateway_app.helpers import GatewayServer, SimulatorProcess, add_deployment, make_model_version

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
MODEL = "sim-coder"
REQUESTS = 4


@pytest.fixture
def world(world):
    from usage.models import GpuPrice
    from usage.services import set_gpu_price

    # A transactional test's flush removes the migration's example prices; CPU engines need one.
    if not GpuPrice.objects.filter(gpu_type__iexact="cpu").exists():
        set_gpu_price("cpu", Decimal("0.04"), unit="cpu_core",
                      effective_from=datetime(2000, 1, 1, tzinfo=dt_timezone.utc),
                      actor=SYSTEM)
    return world


@pytest.fixture
def engine():
    process = SimulatorProcess.start(MODEL, "--decode-ms-per-token", "2", "--prefill-ms-per-token", "0.01")
    yield process
    process.stop()


@pytest.fixture
def gateway(world, engine):
    add_deployment(make_model_version(MODEL), tenant=None, name="shared-sim", urls=[engine.url])
    server = GatewayServer.start()
    yield server
    server.stop()


def send_traffic(gateway, raw_key: str) -> None:
    gateway.wait_until_serving(raw_key, MODEL)
    for index in range(REQUESTS):
        response = httpx.post(f"{gateway.url}/v1/completions", headers={"authorization": f"Bearer {raw_key}"},
                              json={"model": MODEL, "prompt": f"def f{index}():", "max_tokens": 8}, timeout=30)
        assert response.status_code == 200, response.text


def wait_for_usage(count: int, timeout: float = 15.0) -> None:
    from usage.models import UsageEvent

    deadline = time.monotonic() + timeout
    while UsageEvent.objects.filter(outcome="ok").count() < count:
        assert time.monotonic() < deadline, "the gateway did not meter the requests"
        time.sleep(0.1)


def test_gateway_traffic_appears_on_the_overview_and_cost_table_at_once(world, gateway, live_server):
    from usage.refresh import refresh_rollups

    raw_key = make_key(world.a, world.users["alice"], scopes=["inference"]).raw
    send_traffic(gateway, raw_key)
    wait_for_usage(REQUESTS)
    time.sleep(1.1)  # let the engine's up-time exceed its busy time a little, as in any real hour
    with chromium() as browser:  # no rollup has run yet: the requests count from their raw usage events
        page = signed_in(browser, live_server)  # lands on the overview's default view, last 24 hours
        expect(page.locator(".kpi").first).to_contain_text(f"{REQUESTS} requests")
        expect(page.get_by_role("img", name="Requests per hour, last 24 hours")).to_be_visible()
        page.goto(f"{live_server.url}{reverse('console:usage')}")
        expect(page.get_by_role("img", name="Requests per hour")).to_be_visible()
        row = page.locator("#cost-table tbody tr").filter(has_text="tenant-a")
        expect(row.locator("td").nth(1)).to_have_text(str(REQUESTS))
        assert float(row.locator("td").nth(6).get_attribute("data-sort")) > 0  # total cost
    # Outside the browser block: database work inside Playwright's event loop gets a connection of its own.
    refresh_rollups(timezone.now())  # what the periodic `usage.roll_up_recent` task does
    with chromium() as browser:
        page = signed_in(browser, live_server)
        expect(page.locator(".kpi").first).to_contain_text(f"{REQUESTS} requests")  # the same, not doubled
        screenshot(page, "overview-gateway")


def signed_in(browser, live_server):
    page = browser.new_context(viewport={"width": 1280, "height": 860}).new_page()
    sign_in(page, live_server.url, "alice")
    return page
