"""Budgets, GPU prices and key / member quotas in the console: who opens what, writes through services, form errors."""
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent
from fleet.models import Deployment
from quotas.models import QuotaPolicy
from tests.factories import SYSTEM
from usage.models import GpuPrice
from usage.services import record_usage_batch, set_budget_state, set_gpu_price

pytestmark = pytest.mark.django_db


@pytest.fixture
def policies(world):
    """A key-level policy in each tenant (tenant A's on alice's key, tenant B's on bob's)."""
    from quotas.services import create_quota_policy

    return {"a": create_quota_policy(tenant=world.a, api_key=world.keys["a"], requests_per_minute=60, actor=SYSTEM),
            "b": create_quota_policy(tenant=world.b, api_key=world.keys["b"], requests_per_minute=60, actor=SYSTEM)}


def pages(world, policies) -> dict[str, str]:
    return {
        "budgets": reverse("console:budgets"), "prices": reverse("console:prices"),
        "budget-a": reverse("console:budget-edit", args=["tenant-a"]),
        "budget-b": reverse("console:budget-edit", args=["tenant-b"]),
        "quota-new-a": reverse("console:quota-policy-create", args=["tenant-a"]),
        "quota-new-b": reverse("console:quota-policy-create", args=["tenant-b"]),
        "quota-a": reverse("console:quota-policy", args=["tenant-a", policies["a"].pk]),
        "quota-b": reverse("console:quota-policy", args=["tenant-b", policies["b"].pk]),
        # Tenant B's policy under tenant A's slug: the policy is looked up inside the URL's tenant.
        "quota-b-as-a": reverse("console:quota-policy", args=["tenant-a", policies["b"].pk]),
    }


MANAGE_A = {"budget-a", "quota-new-a", "quota-a"}
# Readers of tenant A are refused (403) before any policy id is looked up, so ids reveal nothing either way.
READ_ONLY_A = {name: 403 for name in (*MANAGE_A, "quota-b-as-a")}
# user → status per page; pages not listed answer 404.
EXPECTED = {
    "charlie": {"budgets": 200, "prices": 200, "budget-a": 200, "budget-b": 200, "quota-new-a": 200,
                "quota-new-b": 200, "quota-a": 200, "quota-b": 200},
    "alice": {"budgets": 200, "prices": 200, **{name: 200 for name in MANAGE_A}},
    "bob": {"budgets": 200, "prices": 200, "budget-b": 200, "quota-new-b": 200, "quota-b": 200},
    "erin": {"budgets": 200, "prices": 200, **READ_ONLY_A},
    "victor": {"budgets": 200, "prices": 200, **READ_ONLY_A},
    "dave": {},
    "nobody": {},
}


@pytest.mark.parametrize("user", sorted(EXPECTED))
def test_each_user_opens_exactly_their_pages(world, login, policies, user):
    client = login(user)
    got = {name: client.get(url).status_code for name, url in pages(world, policies).items()}
    assert got == {name: EXPECTED[user].get(name, 404) for name in got}


def test_signed_out_visitors_are_sent_to_sign_in(world, client, policies):
    for url in pages(world, policies).values():
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("console:login"))


def test_navigation_links_budgets_and_prices_to_those_who_may_open_them(world, login):
    html = login("victor").get(reverse("console:budgets")).content.decode()
    assert f'href="{reverse("console:budgets")}" aria-current="page"' in html and reverse("console:prices") in html
    html = login("dave").get(reverse("console:audit")).content.decode()
    assert reverse("console:budgets") not in html and reverse("console:prices") not in html


# Budgets

def _budget(tenant, tokens=None, usd=None):
    QuotaPolicy.objects.filter(tenant=tenant, api_key=None, user=None).update(
        monthly_token_budget=tokens, monthly_budget_usd=usd)


def test_budgets_show_use_against_budget_with_an_accessible_bar(world, login):
    _budget(world.a, tokens=1_000_000, usd=Decimal("10.00"))
    set_budget_state(world.a, over_budget=True, reason="monthly budget of $10.00 used up", tokens=450_000,
                     cost_usd=Decimal("12.5"), actor=SYSTEM)
    html = login("alice").get(reverse("console:budgets")).content.decode()
    assert "1,000,000" in html and "450,000" in html and "$10.00" in html and "$12.50" in html
    assert 'aria-label="Tokens of tenant-a: 45.0 % of the monthly budget used"' in html
    assert 'value="45.0"' in html and "45.0 %" in html
    # Over budget: the bar stops at 100 while the text gives the real share, and the state names the reason.
    assert 'value="100.0"' in html and "125.0 %" in html and "budget-over" in html
    assert "Over budget" in html and "monthly budget of $10.00 used up" in html
    assert "tenant-b" not in html
    everyone = login("charlie").get(reverse("console:budgets")).content.decode()
    assert "tenant-a" in everyone and "tenant-b" in everyone


def test_a_tenant_without_budgets_shows_its_real_use_and_no_budget_set(world, login):
    world.dep_b.instances.update(ready_at=timezone.now() - timedelta(minutes=30))  # 4 CPU cores × $0.04/h
    record_usage_batch([{"request_id": f"b-{i}", "occurred_at": timezone.now(), "tenant_id": world.b.pk,
                         "instance_id": world.dep_b.instances.get().pk, "status_code": 200, "outcome": "ok",
                         "prompt_tokens": 100, "completion_tokens": 20, "latency_ms": 300.0} for i in range(3)])
    response = login("bob").get(reverse("console:budgets"))  # no rollup, no budget check has run
    html = response.content.decode()
    assert html.count("<span class=\"note\">no budget set<") == 2 and "<progress" not in html and "not enforced" in html
    [row] = response.context["rows"]
    assert row["tokens"].used == 360 and Decimal("0.07") < row["usd"].used < Decimal("0.09")  # 30 min of it
    edit = login("bob").get(reverse("console:budget-edit", args=["tenant-b"])).content.decode()
    assert "360" in edit and "no budget set" in edit and "not checked yet" not in edit


def test_last_months_figures_do_not_count_this_month(world, login):
    _budget(world.a, tokens=1000)
    state = set_budget_state(world.a, over_budget=False, reason="", tokens=900, cost_usd=Decimal(0), actor=SYSTEM)
    type(state).objects.filter(pk=state.pk).update(checked_at=datetime(2020, 1, 31, tzinfo=dt_timezone.utc))
    row = login("alice").get(reverse("console:budgets")).context["rows"][0]
    assert row["tokens"].used == 0 and row["tokens"].percent == 0.0


def test_editing_a_budget_updates_the_tenant_policy_with_an_audit_event(world, login):
    response = login("alice").post(reverse("console:budget-edit", args=["tenant-a"]),
                                   {"monthly_token_budget": "5000000", "monthly_budget_usd": "250.50"})
    assert response.status_code == 302 and response["Location"] == reverse("console:budgets")
    policy = QuotaPolicy.objects.get(tenant=world.a, api_key=None, user=None)
    assert (policy.monthly_token_budget, policy.monthly_budget_usd) == (5_000_000, Decimal("250.50"))
    event = AuditEvent.objects.filter(action="quota.update", tenant=world.a).latest("seq")
    assert event.actor_label == "alice" and event.after["monthly_budget_usd"] == "250.50"


def test_a_budget_for_a_tenant_without_a_policy_creates_one(world, login):
    QuotaPolicy.objects.filter(tenant=world.a).delete()
    login("charlie").post(reverse("console:budget-edit", args=["tenant-a"]), {"monthly_token_budget": "100",
                                                                            "monthly_budget_usd": ""})
    assert QuotaPolicy.objects.get(tenant=world.a, api_key=None, user=None).monthly_token_budget == 100
    assert AuditEvent.objects.filter(action="quota.create", tenant=world.a, actor_label="charlie").exists()


def test_budget_edits_are_checked(world, login):
    url = reverse("console:budget-edit", args=["tenant-a"])
    response = login("alice").post(url, {"monthly_token_budget": "-1", "monthly_budget_usd": "abc"})
    assert response.status_code == 200
    assert set(response.context["form"].errors) == {"monthly_token_budget", "monthly_budget_usd"}
    assert 'class="errorlist' in response.content.decode()
    assert login("erin").post(url, {"monthly_token_budget": "1"}).status_code == 403
    assert login("bob").post(url, {"monthly_token_budget": "1"}).status_code == 404
    assert QuotaPolicy.objects.get(tenant=world.a, api_key=None, user=None).monthly_token_budget is None
    assert not AuditEvent.objects.filter(action="quota.update").exists()


# GPU prices

def _price_form(**overrides):
    return {"gpu_type": "H100", "unit": "gpu", "hourly_usd": "3.50", "effective_from": "2030-01-01T00:00",
            "note": "contract", **overrides}


def test_a_platform_admin_adds_a_price_with_an_audit_event(world, login):
    response = login("charlie").post(reverse("console:price-create"), _price_form())
    assert response.status_code == 302
    price = GpuPrice.objects.get(gpu_type="H100", effective_from=datetime(2030, 1, 1, tzinfo=dt_timezone.utc))
    assert price.hourly_usd == Decimal("3.50") and price.note == "contract"
    event = AuditEvent.objects.filter(action="usage.gpu_price.set").latest("seq")
    assert event.actor_label == "charlie" and Decimal(event.after["hourly_usd"]) == Decimal("3.5")


def test_an_empty_effective_from_means_now(world, login):
    # B200: a type no migration prices (capacity 0001 seeds an example L40S price)
    login("charlie").post(reverse("console:price-create"), _price_form(gpu_type="B200", effective_from=""))
    price = GpuPrice.objects.get(gpu_type="B200")
    assert abs((timezone.now() - price.effective_from).total_seconds()) < 60


@pytest.mark.parametrize("overrides,field", [
    ({"hourly_usd": "-1"}, "hourly_usd"),
    ({"hourly_usd": "lots"}, "hourly_usd"),
    ({"unit": "tpu_pod"}, "unit"),
    ({"gpu_type": "../H100"}, "gpu_type"),
    ({"effective_from": "next tuesday"}, "effective_from"),
    ({"gpu_type": "h100"}, "effective_from"),  # the existing H100 price at that moment: types match in any case
])
def test_bad_prices_are_form_errors(world, login, overrides, field):
    set_gpu_price("H100", Decimal("4"), effective_from=datetime(2030, 1, 1, tzinfo=dt_timezone.utc), actor=SYSTEM)
    before = GpuPrice.objects.count()
    response = login("charlie").post(reverse("console:price-create"), _price_form(**overrides))
    assert response.status_code == 200 and field in response.context["form"].errors
    assert 'class="errorlist' in response.content.decode()
    assert GpuPrice.objects.count() == before


def test_only_platform_admins_set_prices(world, login):
    assert login("alice").post(reverse("console:price-create"), _price_form()).status_code == 403
    assert login("dave").post(reverse("console:price-create"), _price_form()).status_code == 404
    assert not GpuPrice.objects.filter(effective_from__year=2030).exists()
    assert "Set a price" not in login("alice").get(reverse("console:prices")).content.decode()
    assert "Set a price" in login("charlie").get(reverse("console:prices")).content.decode()


def test_prices_page_shows_current_history_and_what_deployments_hold(world, login):
    GpuPrice.objects.all().delete()  # the example prices migration 0003 seeds
    past = datetime(2024, 1, 1, tzinfo=dt_timezone.utc)
    set_gpu_price("H100", Decimal("5"), effective_from=past, actor=SYSTEM)
    set_gpu_price("H100", Decimal("4"), effective_from=datetime(2025, 1, 1, tzinfo=dt_timezone.utc), actor=SYSTEM)
    set_gpu_price("H100", Decimal("3"), effective_from=datetime(2099, 1, 1, tzinfo=dt_timezone.utc), actor=SYSTEM)
    Deployment.objects.filter(pk=world.dep_a.pk).update(gpu_type="h100", tensor_parallel_size=2)
    response = login("alice").get(reverse("console:prices"))
    assert [p.hourly_usd for p in response.context["current"]] == [Decimal("4")]
    assert [r["status"] for r in response.context["history"]] == ["scheduled", "current", "superseded"]
    rows = {r["deployment"].name: r for r in response.context["deployments"]}
    assert set(rows) == {"coder-a"}  # tenant B's deployment is not alice's to see
    assert rows["coder-a"]["units"] == 2 and rows["coder-a"]["hourly"] == Decimal("8")  # 1 live × 2 GPUs × $4
    assert "2 GPUs" in response.content.decode()


def test_an_empty_price_list_is_explained(world, login):
    GpuPrice.objects.all().delete()
    html = login("victor").get(reverse("console:prices")).content.decode()
    assert "No prices yet" in html and "A platform admin sets them" in html


# Key and member quotas

def test_an_admin_adds_edits_and_deletes_key_and_member_quotas(world, login):
    client = login("alice")
    key = world.keys["a"]
    response = client.post(reverse("console:quota-policy-create", args=["tenant-a"]),
                           {"subject": f"key:{key.pk}", "requests_per_minute": "30", "max_concurrent_requests": "2"})
    assert response.status_code == 302
    policy = QuotaPolicy.objects.get(api_key=key)
    assert (policy.requests_per_minute, policy.max_concurrent_requests, policy.tenant) == (30, 2, world.a)
    client.post(reverse("console:quota-policy-create", args=["tenant-a"]),
                {"subject": f"user:{world.users['erin'].pk}", "tokens_per_minute": "9000", "allowed_models": "m1, m2"})
    erin_policy = QuotaPolicy.objects.get(tenant=world.a, user=world.users["erin"])
    assert erin_policy.tokens_per_minute == 9000 and erin_policy.allowed_models == ["m1", "m2"]
    html = client.get(reverse("console:tenant", args=["tenant-a"])).content.decode()
    assert f"API key {key.prefix}… {key.name}" in html and "Member erin" in html

    client.post(reverse("console:quota-policy", args=["tenant-a", policy.pk]),
                {"requests_per_minute": "45", "monthly_budget_usd": "12.5"})
    policy.refresh_from_db()
    assert (policy.requests_per_minute, policy.monthly_budget_usd, policy.max_concurrent_requests) == \
        (45, Decimal("12.5"), None)
    client.post(reverse("console:quota-policy-delete", args=["tenant-a", erin_policy.pk]))
    assert not QuotaPolicy.objects.filter(pk=erin_policy.pk).exists()
    actions = list(AuditEvent.objects.filter(tenant=world.a, actor_label="alice", action__startswith="quota.")
                   .order_by("seq").values_list("action", flat=True))
    assert actions == ["quota.create", "quota.create", "quota.update", "quota.delete"]


def test_tenant_b_admin_gets_404_on_tenant_a_policies(world, login, policies):
    client = login("bob")
    a = policies["a"]
    # Under tenant A's slug, and under bob's own slug, where tenant A's policy id is just as unknown.
    for slug in ("tenant-a", "tenant-b"):
        edit = client.post(reverse("console:quota-policy", args=[slug, a.pk]), {"requests_per_minute": "1"})
        assert edit.status_code == 404, slug
        assert client.post(reverse("console:quota-policy-delete", args=[slug, a.pk])).status_code == 404, slug
    assert client.post(reverse("console:quota-policy-create", args=["tenant-a"]),
                       {"subject": f"key:{world.keys['a'].pk}"}).status_code == 404
    a.refresh_from_db()
    assert a.requests_per_minute == 60


def test_subjects_of_another_tenant_or_taken_ones_are_form_errors(world, login, policies):
    url = reverse("console:quota-policy-create", args=["tenant-a"])
    client = login("alice")
    for subject in (f"key:{world.keys['b'].pk}", f"user:{world.users['bob'].pk}", f"key:{world.keys['a'].pk}", "key:x"):
        response = client.post(url, {"subject": subject, "requests_per_minute": "5"})
        assert response.status_code == 200 and "subject" in response.context["form"].errors, subject
    response = client.post(url, {"subject": f"user:{world.users['erin'].pk}", "requests_per_minute": "-5"})
    assert "requests_per_minute" in response.context["form"].errors
    assert QuotaPolicy.objects.filter(tenant=world.a).count() == 2  # tenant-wide + the fixture's key policy


def test_the_tenant_wide_policy_is_not_edited_or_deleted_here(world, login):
    tenant_policy = QuotaPolicy.objects.get(tenant=world.a, api_key=None, user=None)
    client = login("alice")
    assert client.get(reverse("console:quota-policy", args=["tenant-a", tenant_policy.pk])).status_code == 404
    assert client.post(reverse("console:quota-policy-delete", args=["tenant-a", tenant_policy.pk])).status_code == 404
    assert QuotaPolicy.objects.filter(pk=tenant_policy.pk).exists()


def test_readers_see_quotas_without_actions_and_other_members_keys_by_id(world, login, policies):
    html = login("erin").get(reverse("console:tenant", args=["tenant-a"])).content.decode()
    assert f"API key #{world.keys['a'].pk}" in html and world.keys["a"].prefix not in html
    assert reverse("console:quota-policy", args=["tenant-a", policies["a"].pk]) not in html
    html = login("victor").get(reverse("console:tenant", args=["tenant-a"])).content.decode()
    assert f"API key {world.keys['a'].prefix}" in html and "Add a quota" not in html
    delete = reverse("console:quota-policy-delete", args=["tenant-a", policies["a"].pk])
    assert login("erin").post(delete).status_code == 403


def test_no_key_or_member_quota_is_explained(world, login):
    html = login("alice").get(reverse("console:tenant", args=["tenant-a"])).content.decode()
    assert "No key or member has a quota of its own" in html and "Add a quota for a key or member" in html


# CSRF and the fleet's fallback model

def test_every_new_form_needs_a_csrf_token(world, policies):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.users["charlie"])
    for url in (reverse("console:price-create"), reverse("console:budget-edit", args=["tenant-a"]),
                reverse("console:quota-policy-create", args=["tenant-a"]),
                reverse("console:quota-policy", args=["tenant-a", policies["a"].pk]),
                reverse("console:quota-policy-delete", args=["tenant-a", policies["a"].pk])):
        assert client.post(url, {}).status_code == 403, url
    assert QuotaPolicy.objects.filter(pk=policies["a"].pk).exists()


def test_deploying_with_a_fallback_model_is_validated_like_the_api(world, login):
    from tests.console.conftest import make_version

    make_version("other-coder")
    form = {"tenant": "tenant-a", "name": "with-fallback", "model_version": world.version.pk,
            "runtime_backend": "simulator", "min_replicas": 0, "max_replicas": 1, "warm_pool_size": 0, "gpu_type": ""}
    login("alice").post(reverse("console:deploy"), {**form, "fallback_model_name": "other-coder"})
    assert Deployment.objects.get(name="with-fallback").fallback_model_name == "other-coder"
    response = login("alice").post(reverse("console:deploy"), {**form, "name": "self-fallback",
                                                                "fallback_model_name": "console-coder"}, follow=True)
    assert not Deployment.objects.filter(name="self-fallback").exists()
    assert "cannot fall back to its own model" in response.content.decode()
    response = login("alice").post(reverse("console:deploy"), {**form, "name": "ghost", "fallback_model_name": "ghost"})
    assert not Deployment.objects.filter(name="ghost").exists()
    html = login("alice").get(reverse("console:deployment", args=[Deployment.objects.get(name="with-fallback").pk]))
    assert "fallback: other-coder" in html.content.decode()
