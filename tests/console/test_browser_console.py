"""The console in headless Chromium: sign in, keys shown once, audit export, tenant isolation, accessibility."""
import re

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apikeys.models import ApiKey
from tests.console.browser import screenshot, serious_violations, sign_in
from tests.own_cache import clear_own_cache

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page_for(browser, live_server, world):
    """Factory: a fresh signed-in page (own cookies) for one of the world's users."""
    contexts = []

    def open_as(username: str, **options):
        context = browser.new_context(viewport={"width": 1280, "height": 860}, accept_downloads=True, **options)
        contexts.append(context)
        page = context.new_page()
        sign_in(page, live_server.url, username)
        return page

    yield open_as
    for context in contexts:
        context.close()


def test_sign_in_lands_on_the_overview(page_for, live_server):
    page = page_for("alice")
    assert page.url == f"{live_server.url}/console/"
    assert page.get_by_role("heading", name="Overview").is_visible()


def test_a_new_api_key_is_shown_once(page_for, live_server):
    page = page_for("alice")
    page.goto(f"{live_server.url}{reverse('console:keys')}")
    page.get_by_label("Name").fill("browser key")
    page.get_by_role("button", name="Create key").click()
    secret = page.get_by_label(re.compile("Secret of")).input_value()
    key = ApiKey.objects.get(name="browser key")
    assert secret.startswith(key.prefix) and len(secret) > len(key.prefix) + 20
    page.get_by_role("button", name="Copy").click()  # clipboard may be denied headless: a message either way
    expect(page.locator(".copy-status")).to_have_text(re.compile(r"\w"))
    page.get_by_role("link", name=re.compile("back to API keys")).click()
    assert key.prefix in page.content() and secret not in page.content()
    page.reload()
    assert secret not in page.content()


def test_the_audit_trail_downloads_as_csv(page_for, live_server):
    page = page_for("charlie")
    page.goto(f"{live_server.url}{reverse('console:audit')}")
    with page.expect_download() as download_info:
        page.get_by_role("link", name="Export CSV").click()
    download = download_info.value
    assert download.suggested_filename == "switchyard-audit.csv"
    with open(download.path(), encoding="utf-8") as handle:
        text = handle.read()
    assert text.startswith("seq,") and "tenant.create" in text and "auth.login" in text


def test_a_tenant_a_admin_opening_a_tenant_b_url_gets_404(page_for, live_server, world):
    page = page_for("alice")
    response = page.goto(f"{live_server.url}{reverse('console:tenant', args=['tenant-b'])}")
    assert response.status == 404
    response = page.goto(f"{live_server.url}{reverse('console:deployment', args=[world.dep_b.pk])}")
    assert response.status == 404
    assert page.goto(f"{live_server.url}{reverse('console:tenant', args=['tenant-a'])}").status == 200


def test_sortable_tables_sort_with_the_keyboard(page_for, live_server):
    page = page_for("charlie")
    page.goto(f"{live_server.url}{reverse('console:tenants')}")
    header = page.get_by_role("button", name=re.compile("^Tenant"))
    header.focus()
    page.keyboard.press("Enter")
    page.keyboard.press("Enter")
    cells = page.locator("table.sortable tbody tr td:first-child").all_inner_texts()
    assert cells == sorted(cells, reverse=True)
    assert page.locator("th[aria-sort=descending]").count() == 1


def test_budget_bars_are_named_and_a_duplicate_price_is_a_form_error(page_for, live_server, world):
    budgets_prices_and_quotas(world)
    page = page_for("charlie")
    page.goto(f"{live_server.url}{reverse('console:budgets')}")
    bar = page.get_by_role("progressbar", name="Spend of tenant-b: 103.1 % of the monthly budget used")
    assert bar.get_attribute("value") == "100.0"
    expect(page.get_by_role("row", name=re.compile("tenant-b"))).to_contain_text("Over budget")
    page.goto(f"{live_server.url}{reverse('console:prices')}")
    for _attempt in range(2):
        page.get_by_label("GPU type").fill("B200")
        page.get_by_label("Price per hour (USD)").fill("6.25")
        page.get_by_label("Effective from (UTC)").fill("2030-01-01T00:00")
        page.get_by_role("button", name="Add price").click()
    expect(page.locator(".errorlist")).to_contain_text("already has a price from that moment")
    assert page.get_by_label("GPU type").input_value() == "B200"  # what was typed is kept


def test_instances_refresh_themselves(page_for, live_server, world):
    page = page_for("alice")
    page.goto(f"{live_server.url}{reverse('console:deployment', args=[world.dep_a.pk])}")
    assert page.locator("#progress-text").inner_text() == "1 of 1 ready"
    instance = world.dep_a.instances.get()
    instance.metrics = {"num_requests_waiting": 7, "kv_cache_usage_perc": 0.5}
    instance.save(update_fields=["metrics"])  # what the health checker writes
    # No string evaluation here: the page's CSP forbids eval, and the test must not need it either.
    expect(page.locator('[data-field="queue"]')).to_have_text("7", timeout=10_000)
    expect(page.locator('[data-field="kv_cache"]')).to_have_text("50.0 %")


def test_the_first_minutes_read_true_styled_and_within_the_csp(page_for, live_server, world):
    from datetime import timedelta

    from django.utils import timezone

    from tests.console.test_overview_rollups import first_request
    from tests.console.test_usage_pages import traffic

    world.dep_a.instances.update(ready_at=timezone.now() - timedelta(minutes=30))  # a CPU instance: 4 cores
    traffic(world)  # 20 requests, rolled up
    first_request(world)  # one more, not rolled up yet
    page = page_for("charlie")
    refused = []
    page.on("console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text
            else None)
    page.goto(f"{live_server.url}{reverse('console:home')}")  # the default view: last 24 hours
    expect(page.locator(".kpi").first).to_contain_text("21 requests")
    expect(page.locator(".kpi").last).to_contain_text("Total cost per completion")
    # The stylesheet applied (the page's background colour comes from console.css only).
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(243, 245, 248)"
    page.goto(f"{live_server.url}{reverse('console:usage')}")
    headers = [text.split("\n")[0] for text in page.locator("#cost-table thead th").all_inner_texts()]
    assert "CPU core-hours" in headers and "GPU-hours" not in headers and "Total cost per completion" in headers
    page.goto(f"{live_server.url}{reverse('console:budgets')}")
    row = page.get_by_role("row", name=re.compile("tenant-a"))
    expect(row).to_contain_text("no budget set")
    expect(row.locator("td").nth(2)).to_have_text("2,438")  # 20 × 120 + 38 tokens this month, not 0
    page.goto(f"{live_server.url}{reverse('console:slow')}?range=1h")
    expect(page.locator("p.note").last).to_contain_text("start of each prompt after secret redaction")
    assert refused == []


# (screenshot name, route, URL args — or the key of an id that budgets_prices_and_quotas returns)
PAGES = [("overview", "console:home", ()), ("tenants", "console:tenants", ()),
         ("tenant", "console:tenant", ("tenant-a",)), ("keys", "console:keys", ()), ("fleet", "console:fleet", ()),
         ("deployment", "console:deployment", "deployment"),
         ("models", "console:models", ()), ("usage", "console:usage", ()), ("budgets", "console:budgets", ()),
         ("budget-edit", "console:budget-edit", ("tenant-a",)), ("prices", "console:prices", ()),
         ("quota-new", "console:quota-policy-create", ("tenant-a",)), ("quota-edit", "console:quota-policy", "policy"),
         ("audit", "console:audit", ()), ("audit-verify", "console:audit-verify", ()), ("slow", "console:slow", ()),
         ("invitations", "console:invitations", ())]


def budgets_prices_and_quotas(world) -> dict:
    """What the budget, price and quota pages show: a tenant near and one over budget, prices, a key quota."""
    from datetime import datetime
    from datetime import timezone as dt_timezone
    from decimal import Decimal

    from fleet.models import Deployment
    from quotas.models import QuotaPolicy
    from quotas.services import create_quota_policy
    from tests.factories import SYSTEM
    from usage.services import set_budget_state, set_gpu_price

    QuotaPolicy.objects.filter(tenant=world.a, api_key=None).update(monthly_token_budget=2_000_000,
                                                                     monthly_budget_usd=Decimal("500"))
    QuotaPolicy.objects.filter(tenant=world.b, api_key=None).update(monthly_budget_usd=Decimal("40"))
    set_budget_state(world.a, over_budget=False, reason="", tokens=1_700_000, cost_usd=Decimal("212.40"), actor=SYSTEM)
    set_budget_state(world.b, over_budget=True, reason="monthly budget of $40.00 used up", tokens=310_000,
                     cost_usd=Decimal("41.25"), actor=SYSTEM)
    for gpu_type, unit, price, year in (("H100", "gpu", "4.50", 2025), ("H100", "gpu", "4.00", 2026),
                                        ("L4", "gpu", "0.80", 2025), ("cpu", "cpu_core", "0.04", 2025)):
        set_gpu_price(gpu_type, Decimal(price), unit=unit, effective_from=datetime(year, 1, 1, tzinfo=dt_timezone.utc),
                      note="list price", actor=SYSTEM)
    Deployment.objects.filter(pk=world.dep_a.pk).update(gpu_type="H100", tensor_parallel_size=2)
    policy = create_quota_policy(tenant=world.a, api_key=world.keys["erin"], requests_per_minute=30,
                                 max_concurrent_requests=2, actor=SYSTEM)
    from tenants.services import invite_member

    for email in (world.users["charlie"].email, "newcomer@example.test"):  # the invitee's page, the tenant's list
        invite_member(tenant=world.a, email=email, role="viewer", actor=SYSTEM)
    return {"deployment": [world.dep_a.pk], "policy": ["tenant-a", policy.pk]}


def test_every_page_has_no_serious_accessibility_violations(browser, page_for, live_server, world):
    from tests.console.test_usage_pages import traffic

    traffic(world, 30)
    ids = budgets_prices_and_quotas(world)
    page = page_for("charlie", bypass_csp=True)
    found = {}
    for name, route, args in PAGES:
        page.goto(f"{live_server.url}{reverse(route, args=ids[args] if isinstance(args, str) else args)}")
        found[name] = serious_violations(page)
        screenshot(page, name)
    page.goto(f"{live_server.url}{reverse('console:keys')}")
    page.get_by_label("Name").fill("shown once")
    page.get_by_role("button", name="Create key").click()
    found["key-secret"] = serious_violations(page)
    screenshot(page, "key-secret")
    anonymous = browser.new_context(bypass_csp=True).new_page()
    anonymous.goto(f"{live_server.url}{reverse('console:login')}")
    found["login"] = serious_violations(anonymous)
    screenshot(anonymous, "login")
    assert {name: v for name, v in found.items() if v} == {}


def test_a_locked_sign_in_says_so_in_the_live_region(browser, live_server, world, settings):
    settings.SWITCHYARD_LOGIN_FAILURES_PER_USERNAME = 2
    clear_own_cache()
    page = browser.new_context().new_page()
    for _ in range(2):
        page.goto(f"{live_server.url}{reverse('console:login')}")
        page.get_by_label("Username").fill("alice")
        page.get_by_label("Password").fill("not the password")
        page.keyboard.press("Enter")
        expect(page.get_by_role("alert")).to_contain_text("correct username and password")
    sign_in_page = page.goto(f"{live_server.url}{reverse('console:login')}")
    assert sign_in_page.status == 200
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("correct horse battery 9")
    page.keyboard.press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("Too many failed sign-ins")
    assert "/console/login/" in page.url
    clear_own_cache()
