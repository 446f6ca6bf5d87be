"""Console writes go through the services, check the caller's role, and stay inside the caller's tenants."""
import re

import pytest
from django.test import Client
from django.urls import reverse

from apikeys.models import ApiKey
from audit.models import AuditEvent
from fleet.states import InstanceState
from quotas.models import QuotaPolicy
from tenants.models import Membership, Tenant

pytestmark = pytest.mark.django_db
SECRET = re.compile(r'value="(sy_[^"]+)"')


def secret_in(response) -> str:
    match = SECRET.search(response.content.decode())
    assert match, "the secret was not shown"
    return match.group(1)


def test_a_new_key_is_shown_once_and_never_listed(world, login):
    client = login("alice")
    response = client.post(reverse("console:key-create"), {"tenant": "tenant-a", "name": "laptop",
                                                           "scopes": ["inference"], "role": "developer"})
    raw = secret_in(response)
    assert response["Cache-Control"].startswith("max-age=0") or "no-store" in response["Cache-Control"]
    key = ApiKey.objects.get(name="laptop")
    assert raw.startswith(key.prefix) and key.user == world.users["alice"]
    listing = client.get(reverse("console:keys")).content.decode()
    assert key.prefix in listing and raw not in listing
    assert AuditEvent.objects.filter(action="api_key.create", actor_label="alice").exists()


def test_a_developer_gets_an_inference_key_of_their_own_whatever_they_ask(world, login):
    login("erin").post(reverse("console:key-create"), {"tenant": "tenant-a", "name": "mine",
                                                       "scopes": ["admin"], "role": "owner"})
    key = ApiKey.objects.get(name="mine")
    assert (key.scopes, key.role, key.user) == (["inference"], "developer", world.users["erin"])


def test_rotating_shows_the_successor_secret_once(world, login):
    response = login("alice").post(reverse("console:key-rotate", args=[world.keys["a"].pk]))
    raw = secret_in(response)
    successor = ApiKey.objects.get(rotated_from=world.keys["a"])
    assert raw.startswith(successor.prefix)


def test_revoke_respects_visibility_and_role(world, login):
    assert login("erin").post(reverse("console:key-revoke", args=[world.keys["a"].pk])).status_code == 404
    assert login("victor").post(reverse("console:key-revoke", args=[world.keys["erin"].pk])).status_code == 403
    assert login("alice").post(reverse("console:key-revoke", args=[world.keys["b"].pk])).status_code == 404
    assert login("erin").post(reverse("console:key-revoke", args=[world.keys["erin"].pk])).status_code == 302
    assert ApiKey.objects.get(pk=world.keys["erin"].pk).state() == "revoked"
    assert ApiKey.objects.get(pk=world.keys["a"].pk).state() == "active"


def test_tenant_b_urls_are_404_for_a_tenant_a_owner(world, login):
    client = login("alice")
    bob_membership = Membership.objects.get(user=world.users["bob"])
    posts = [reverse("console:member-add", args=["tenant-b"]), reverse("console:quota-update", args=["tenant-b"]),
             reverse("console:member-role", args=["tenant-b", bob_membership.pk]),
             reverse("console:member-remove", args=["tenant-b", bob_membership.pk]),
             reverse("console:scale", args=[world.dep_b.pk]),
             reverse("console:deployment-delete", args=[world.dep_b.pk]),
             reverse("console:scaling", args=[world.dep_b.pk]),
             reverse("console:instance-action", args=[world.dep_b.pk, world.dep_b.instances.get().pk, "drain"])]
    for url in posts:
        assert client.post(url, {"role": "viewer", "email": "x@example.test", "min_replicas": 1,
                                 "max_replicas": 1, "warm_pool_size": 0}).status_code == 404, url
    assert Membership.objects.filter(tenant=world.b).count() == 1


def test_members_are_managed_within_ones_rank(world, login):
    client = login("alice")
    client.post(reverse("console:member-add", args=["tenant-a"]), {"email": "nobody@example.test", "role": "developer"})
    invitation = world.a.invitations.get(email="nobody@example.test", status="pending")
    accept = reverse("console:invitation-answer", args=[invitation.pk, "accept"])
    assert login("nobody").post(accept).status_code == 302
    member = Membership.objects.get(tenant=world.a, user__email="nobody@example.test", role="developer")
    client.post(reverse("console:member-role", args=["tenant-a", member.pk]), {"role": "viewer"})
    assert Membership.objects.get(pk=member.pk).role == "viewer"
    client.post(reverse("console:member-remove", args=["tenant-a", member.pk]))
    assert not Membership.objects.filter(pk=member.pk).exists()
    denied = login("erin").post(reverse("console:member-add", args=["tenant-a"]),
                                {"email": "z@example.test", "role": "viewer"})
    assert denied.status_code == 403


def test_quota_edit_needs_manage_quotas(world, login):
    url = reverse("console:quota-update", args=["tenant-a"])
    form = {"requests_per_minute": "600", "allowed_models": "console-coder, other"}
    assert login("erin").post(url, form).status_code == 403
    login("alice").post(url, form)
    policy = QuotaPolicy.objects.get(tenant=world.a, api_key=None, user=None)
    assert policy.requests_per_minute == 600 and policy.allowed_models == ["console-coder", "other"]


def test_quota_edit_creates_the_tenant_wide_policy_when_there_is_none(world, login):
    QuotaPolicy.objects.filter(tenant=world.a, api_key=None, user=None).delete()
    login("alice").post(reverse("console:quota-update", args=["tenant-a"]), {"requests_per_minute": "90"})
    assert QuotaPolicy.objects.get(tenant=world.a, api_key=None, user=None).requests_per_minute == 90


def test_only_platform_admins_create_and_suspend_tenants(world, login):
    assert login("alice").post(reverse("console:tenant-create"), {"slug": "x", "name": "X", "region": "local",
                                                                  "isolation": "shared"}).status_code == 403
    assert login("alice").post(reverse("console:tenant-status", args=["tenant-a", "suspend"])).status_code == 403
    charlie = login("charlie")
    charlie.post(reverse("console:tenant-create"), {"slug": "gamma", "name": "Gamma", "region": "local",
                                                    "isolation": "dedicated", "admin_email": "it@gamma.test"})
    charlie.post(reverse("console:tenant-status", args=["gamma", "suspend"]))
    assert Tenant.objects.get(slug="gamma").status == "suspended"


def test_fleet_actions_need_the_admin_role(world, login):
    scale = {"min_replicas": 2, "max_replicas": 3, "warm_pool_size": 0}
    assert login("erin").post(reverse("console:scale", args=[world.dep_a.pk]), scale).status_code == 403
    login("alice").post(reverse("console:scale", args=[world.dep_a.pk]), scale)
    world.dep_a.refresh_from_db()
    assert (world.dep_a.min_replicas, world.dep_a.max_replicas) == (2, 3)
    instance = world.dep_a.instances.get()
    login("alice").post(reverse("console:instance-action", args=[world.dep_a.pk, instance.pk, "drain"]))
    instance.refresh_from_db()
    assert instance.state == InstanceState.DRAINING


def test_autoscaling_is_set_from_the_deployment_page_and_shown_there(world, login):
    from django.utils import timezone

    from fleet.models import DemandSample, ScalingDecision

    policy = {"enabled": "on", "queue_per_instance": 4, "kv_cache_usage": 0.9, "ttft_p95_slo_ms": "",
              "up_window_seconds": 20, "low_water_per_instance": 1, "idle_window_seconds": 300,
              "zero_after_idle_seconds": 900, "cooldown_up_seconds": 60, "cooldown_down_seconds": 300, "max_step": 2,
              "wake_timeout_seconds": 120}
    url = reverse("console:scaling", args=[world.dep_a.pk])
    assert login("erin").post(url, policy).status_code == 403
    assert login("alice").post(url, {**policy, "kv_cache_usage": 3}).status_code == 302
    assert not hasattr(type(world.dep_a).objects.get(pk=world.dep_a.pk), "scaling") or \
        not type(world.dep_a).objects.get(pk=world.dep_a.pk).scaling.enabled
    login("alice").post(url, policy)
    world.dep_a.refresh_from_db()
    assert world.dep_a.scaling.enabled and world.dep_a.scaling.queue_per_instance == 4
    now = timezone.now()
    DemandSample.objects.create(deployment=world.dep_a, at=now, serving=1, warm=1, waiting=9)
    ScalingDecision.objects.create(deployment=world.dep_a, decided_at=now, rule="queue", action="up", from_serving=1,
                                   to_serving=2, reason="9.0 waiting per instance > 4 for 20 s")
    page = login("alice").get(reverse("console:deployment", args=[world.dep_a.pk])).content.decode()
    assert "autoscaled" in page and "9.0 waiting per instance &gt; 4 for 20 s" in page
    assert 'class="chart-line chart-serving"' in page and "1 scaling decisions marked" in page


def test_a_schedule_is_set_as_lines_in_the_policy_form_and_shown_back(world, login):
    policy = {"enabled": "on", "queue_per_instance": 8, "kv_cache_usage": 0.9, "ttft_p95_slo_ms": "",
              "up_window_seconds": 20, "low_water_per_instance": 1, "idle_window_seconds": 300,
              "zero_after_idle_seconds": 900, "cooldown_up_seconds": 60, "cooldown_down_seconds": 300, "max_step": 2,
              "wake_timeout_seconds": 120, "schedule_lead_seconds": 240,
              "schedule": "mon-fri 09:00-09:30 Europe/Berlin 1\r\n\r\nsat 22:00-02:00 1"}
    url = reverse("console:scaling", args=[world.dep_a.pk])
    alice = login("alice")
    alice.post(url, policy)
    world.dep_a.refresh_from_db()
    assert world.dep_a.scaling.schedule_lead_seconds == 240
    assert world.dep_a.scaling.schedule == [
        {"days": "mon-fri", "start": "09:00", "end": "09:30", "time_zone": "Europe/Berlin", "min_serving": 1},
        {"days": "sat", "start": "22:00", "end": "02:00", "time_zone": "UTC", "min_serving": 1}]
    page = alice.get(reverse("console:deployment", args=[world.dep_a.pk])).content.decode()
    assert "mon-fri 09:00-09:30 Europe/Berlin 1\nsat 22:00-02:00 UTC 1</textarea>" in page
    assert '<label for="id_schedule">' in page  # a labelled field: reachable and named for keyboard and reader
    for bad, shown in (("mon-fri 09:00 4", "Line 1: write"), ("mon 9-10 1", "Window 1: start must be a time"),
                       ("mon 09:00-09:30 Mars/Base 1", "unknown time zone"),
                       ("mon 09:00-09:30 UTC 5", "above the deployment&#x27;s max_replicas")):
        answer = alice.post(url, {**policy, "schedule": bad}, follow=True).content.decode()
        assert shown in answer
        world.dep_a.refresh_from_db()
        assert len(world.dep_a.scaling.schedule) == 2  # unchanged


def test_instances_endpoint_reports_progress(world, login):
    data = login("alice").get(reverse("console:instances-json", args=[world.dep_a.pk])).json()
    instance = data["instances"][0]
    assert data["summary"]["ready"] == 1 and instance["queue"] == 2 and instance["kv_cache"] == 25.0


def test_registry_writes_are_platform_only(world, login):
    assert login("alice").post(reverse("console:model-create"), {"name": "m", "family": "other"}).status_code == 403
    charlie = login("charlie")
    charlie.post(reverse("console:model-create"), {"name": "qwen-test", "family": "qwen-coder"})
    from models_registry.models import Model

    model = Model.objects.get(name="qwen-test")
    charlie.post(reverse("console:version-create", args=[model.pk]),
                 {f"m{model.pk}-{k}": v for k, v in {"version": "v1", "artifact_uri": "s3://models/qwen-test/v1",
                                                     "quantization": "none", "dtype": "auto"}.items()})
    version = model.versions.get()
    charlie.post(reverse("console:version-action", args=[version.pk, "publish"]))
    version.refresh_from_db()
    assert version.status == "published"


def test_a_version_gets_its_fim_template_from_the_console_and_a_bad_one_is_explained(world, login):
    from models_registry.models import Model

    charlie = login("charlie")
    charlie.post(reverse("console:model-create"), {"name": "fim-test", "family": "other"})
    model = Model.objects.get(name="fim-test")

    def create(label: str, template: str):
        fields = {"version": label, "artifact_uri": f"s3://models/fim-test/{label}", "quantization": "none",
                  "dtype": "auto", "fim_template": template}
        return charlie.post(reverse("console:version-create", args=[model.pk]),
                            {f"m{model.pk}-{k}": v for k, v in fields.items()}, follow=True)

    create("v1", "<pre>{prefix}<suf>{suffix}<mid>")
    assert model.versions.get(version="v1").fim_template == "<pre>{prefix}<suf>{suffix}<mid>"
    page = create("v2", "<pre>{prefix}<mid>").content.decode()
    assert not model.versions.filter(version="v2").exists() and "{suffix} exactly once" in page


def test_every_form_needs_its_csrf_token(world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.users["alice"])
    response = client.post(reverse("console:key-create"), {"tenant": "tenant-a", "name": "x", "scopes": ["inference"],
                                                           "role": "developer"})
    assert response.status_code == 403 and not ApiKey.objects.filter(name="x").exists()
    page = client.get(reverse("console:keys")).content.decode()
    assert page.count("csrfmiddlewaretoken") >= page.count('method="post"')


def test_chain_verification_page_says_intact(world, login):
    html = login("charlie").get(reverse("console:audit-verify")).content.decode()
    assert "The audit chain is intact" in html
