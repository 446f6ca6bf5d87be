"""Every write service appends exactly the audit events it should, in its own transaction, secrets masked."""
import inspect
import json
from types import SimpleNamespace

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import transaction

import apikeys.services
import quotas.services
import tenants.services
from apikeys import keyformat
from apikeys.models import ApiKey
from audit.actor import Actor
from audit.models import AuditChainHead, AuditEvent
from audit.services import record_event
from quotas.models import QuotaPolicy
from tenants.models import Tenant
from tests.factories import SYSTEM, make_key, make_member, make_tenant, make_user

SERVICE_MODULES = (tenants.services, apikeys.services, quotas.services)
READ_ONLY = {"tenant_view", "membership_view", "invitation_view", "invitation_email", "limits_for"}
ACTOR = Actor.system("audit-tests")


@pytest.fixture
def world(db):
    """Tenant A with an owner, a developer holding two live keys and one revoked, and a key-level quota."""
    tenant = make_tenant("tenant-a")
    owner = make_member(tenant, "owner", make_user("alice"))
    dev = make_member(tenant, "developer", make_user("dana"))
    keys = [make_key(tenant, dev, role="developer", scopes=("inference",)) for _ in range(3)]
    apikeys.services.revoke_api_key(keys[2].api_key, actor=SYSTEM)
    policy = quotas.services.create_quota_policy(tenant=tenant, api_key=keys[0].api_key, actor=SYSTEM, requests_per_minute=5)
    return SimpleNamespace(tenant=tenant, owner=owner, dev=dev, keys=keys, policy=policy,
                           dev_membership=dev.memberships.get(tenant=tenant))


def _invitation(world):
    """A pending invitation to guest@example.test, made without an audit row (so the case counts only its own)."""
    from datetime import timedelta

    from django.utils import timezone

    from tenants.models import Invitation

    return Invitation.objects.create(tenant=world.tenant, email="guest@example.test", role="viewer",
                                     expires_at=timezone.now() + timedelta(days=1))


# name -> (call with the world, the actions it must append in order)
CASES = {
    "create_tenant": (lambda w: tenants.services.create_tenant(slug="new-one", name="New", actor=ACTOR),
                      ["tenant.create", "quota.create"]),
    "update_tenant": (lambda w: tenants.services.update_tenant(w.tenant, name="Renamed", actor=ACTOR), ["tenant.update"]),
    "set_tenant_status": (lambda w: tenants.services.set_tenant_status(w.tenant, "suspended", actor=ACTOR),
                          ["tenant.suspend"]),
    "delete_tenant": (lambda w: tenants.services.delete_tenant(w.tenant, actor=ACTOR), ["tenant.delete"]),
    "add_member": (lambda w: tenants.services.add_member(tenant=w.tenant, email="new@a.test", role="viewer", actor=ACTOR),
                   ["member.add"]),
    "change_member_role": (lambda w: tenants.services.change_member_role(w.dev_membership, "viewer", actor=ACTOR),
                           ["member.update"]),
    "invite_member": (lambda w: tenants.services.invite_member(tenant=w.tenant, email="new@a.test", role="viewer",
                                                               actor=ACTOR), ["member.invite"]),
    "accept_invitation": (lambda w: tenants.services.accept_invitation(
        _invitation(w), user=make_user("guest"), actor=ACTOR), ["member.invitation_accept", "member.add"]),
    "decline_invitation": (lambda w: tenants.services.decline_invitation(
        _invitation(w), user=make_user("guest"), actor=ACTOR), ["member.invitation_decline"]),
    "revoke_invitation": (lambda w: tenants.services.revoke_invitation(_invitation(w), actor=ACTOR),
                          ["member.invitation_revoke"]),
    # two live keys revoked (the already-revoked third one is not audited again), then the removal itself
    "remove_member": (lambda w: tenants.services.remove_member(w.dev_membership, actor=ACTOR),
                      ["api_key.revoke", "api_key.revoke", "member.remove"]),
    "create_api_key": (lambda w: apikeys.services.create_api_key(tenant=w.tenant, name="k", scopes=["inference"],
                                                                 actor=ACTOR), ["api_key.create"]),
    "revoke_api_key": (lambda w: apikeys.services.revoke_api_key(w.keys[0].api_key, actor=ACTOR), ["api_key.revoke"]),
    "rotate_api_key": (lambda w: apikeys.services.rotate_api_key(w.keys[0].api_key, grace_seconds=60, actor=ACTOR),
                       ["api_key.rotate"]),
    "revoke_user_keys": (lambda w: apikeys.services.revoke_user_keys(tenant=w.tenant, user=w.dev, actor=ACTOR),
                         ["api_key.revoke", "api_key.revoke"]),
    # last-used telemetry is deliberately not audited (it would write a row per request)
    "record_key_use": (lambda w: apikeys.services.record_key_use(w.keys[0].api_key), []),
    "create_quota_policy": (lambda w: quotas.services.create_quota_policy(
        tenant=w.tenant, user=w.dev, requests_per_minute=10, actor=ACTOR), ["quota.create"]),
    "update_quota_policy": (lambda w: quotas.services.update_quota_policy(w.policy, tokens_per_minute=99, actor=ACTOR),
                            ["quota.update"]),
    "delete_quota_policy": (lambda w: quotas.services.delete_quota_policy(w.policy, actor=ACTOR), ["quota.delete"]),
    "set_tenant_budget": (lambda w: quotas.services.set_tenant_budget(
        w.tenant, monthly_token_budget=1_000_000, monthly_budget_usd=250, actor=ACTOR), ["quota.update"]),
}


def _new_events(since_seq: int) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(seq__gt=since_seq).order_by("seq"))


def _head() -> tuple[int, str]:
    head = AuditChainHead.objects.get(pk=1)
    return head.seq, head.hash


def test_the_table_covers_every_write_service():
    public = {name for module in SERVICE_MODULES for name, fn in inspect.getmembers(module, inspect.isfunction)
              if fn.__module__ == module.__name__ and not name.startswith("_")}
    assert public - READ_ONLY == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_service_appends_exactly_its_events(world, name):
    call, expected = CASES[name]
    before_seq, _ = _head()
    call(world)
    events = _new_events(before_seq)
    assert [e.action for e in events] == expected
    assert all(e.actor_label == "audit-tests" and e.actor_type == "system" for e in events)
    assert [e.seq for e in events] == list(range(before_seq + 1, before_seq + 1 + len(expected)))
    call_command("audit_verify")


def test_remove_member_events_name_each_revoked_key(world):
    before_seq, _ = _head()
    tenants.services.remove_member(world.dev_membership, actor=ACTOR)
    revokes = [e for e in _new_events(before_seq) if e.action == "api_key.revoke"]
    assert sorted(e.target_id for e in revokes) == sorted(str(k.api_key.pk) for k in world.keys[:2])
    assert all(e.tenant_id == world.tenant.pk and e.tenant_slug == "tenant-a" for e in revokes)


@pytest.mark.parametrize("call", [
    lambda w: tenants.services.set_tenant_status(w.tenant, "active", actor=ACTOR),
    lambda w: tenants.services.change_member_role(w.dev_membership, "developer", actor=ACTOR),
    lambda w: apikeys.services.revoke_api_key(w.keys[2].api_key, actor=ACTOR),
    lambda w: apikeys.services.revoke_user_keys(tenant=w.tenant, user=w.owner, actor=ACTOR),
], ids=["same-status", "same-role", "revoke-again", "no-keys"])
def test_no_op_writes_append_nothing(world, call):
    before = _head()
    call(world)
    assert _head() == before


FAILING = {
    "create_tenant-bad-slug": lambda w: tenants.services.create_tenant(slug="Bad Slug!", name="x", actor=ACTOR),
    "update_tenant-unknown-field": lambda w: tenants.services.update_tenant(w.tenant, slug="x", actor=ACTOR),
    "update_tenant-name-too-long": lambda w: tenants.services.update_tenant(w.tenant, name="x" * 201, actor=ACTOR),
    "set_tenant_status-bad": lambda w: tenants.services.set_tenant_status(w.tenant, "gone", actor=ACTOR),
    "add_member-duplicate": lambda w: tenants.services.add_member(tenant=w.tenant, email=w.dev.email, role="viewer",
                                                                  actor=ACTOR),
    "add_member-bad-role": lambda w: tenants.services.add_member(tenant=w.tenant, email="n@a.test", role="god",
                                                                 actor=ACTOR),
    "invite_member-a-member": lambda w: tenants.services.invite_member(tenant=w.tenant, email=w.dev.email,
                                                                       role="viewer", actor=ACTOR),
    "invite_member-bad-role": lambda w: tenants.services.invite_member(tenant=w.tenant, email="n@a.test", role="god",
                                                                       actor=ACTOR),
    "accept_invitation-other-address": lambda w: tenants.services.accept_invitation(
        _invitation(w), user=w.dev, actor=ACTOR),
    "demote-last-owner": lambda w: tenants.services.change_member_role(
        w.owner.memberships.get(tenant=w.tenant), "admin", actor=ACTOR),
    "remove-last-owner": lambda w: tenants.services.remove_member(w.owner.memberships.get(tenant=w.tenant), actor=ACTOR),
    "create_api_key-no-name": lambda w: apikeys.services.create_api_key(tenant=w.tenant, name="", scopes=["inference"],
                                                                        actor=ACTOR),
    "rotate-revoked": lambda w: apikeys.services.rotate_api_key(w.keys[2].api_key, actor=ACTOR),
    "rotate-bad-grace": lambda w: apikeys.services.rotate_api_key(w.keys[0].api_key, grace_seconds=-5, actor=ACTOR),
    "create_quota-negative": lambda w: quotas.services.create_quota_policy(
        tenant=w.tenant, user=w.dev, requests_per_minute=-1, actor=ACTOR),
    "update_quota-negative": lambda w: quotas.services.update_quota_policy(w.policy, tokens_per_minute=-1, actor=ACTOR),
    "delete-tenant-wide-quota": lambda w: quotas.services.delete_quota_policy(
        QuotaPolicy.objects.get(tenant=w.tenant, api_key=None, user=None), actor=ACTOR),
}


@pytest.mark.parametrize("name", sorted(FAILING))
def test_failed_validation_leaves_no_event(world, name):
    before = _head()
    count = AuditEvent.objects.count()
    with pytest.raises(ValidationError):
        FAILING[name](world)
    assert _head() == before and AuditEvent.objects.count() == count


@pytest.mark.parametrize("name", ["create_tenant", "add_member", "remove_member", "create_api_key", "rotate_api_key",
                                  "update_quota_policy"])
def test_failure_after_the_event_rolls_back_event_and_change(world, name):
    before, count, keys = _head(), AuditEvent.objects.count(), ApiKey.objects.count()
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            CASES[name][0](world)
            assert AuditEvent.objects.count() > count
            raise RuntimeError("the caller fails after the service returned")
    assert _head() == before and AuditEvent.objects.count() == count
    assert ApiKey.objects.count() == keys
    assert not Tenant.objects.filter(slug="new-one").exists()
    world.dev_membership.refresh_from_db()  # still there
    call_command("audit_verify")


def _all_text(events) -> str:
    return json.dumps([[e.actor_label, e.before, e.after] for e in events], default=str)


def test_key_events_never_hold_the_hash_or_the_secret(world):
    before_seq, _ = _head()
    minted = apikeys.services.create_api_key(tenant=world.tenant, name="k", scopes=["admin"], actor=ACTOR)
    rotated = apikeys.services.rotate_api_key(minted.api_key, grace_seconds=0, actor=Actor.for_api_key(minted.api_key))
    apikeys.services.revoke_api_key(rotated.api_key, actor=ACTOR)
    text = _all_text(_new_events(before_seq))
    assert minted.api_key.prefix in text and rotated.api_key.prefix in text
    for raw in (minted.raw, rotated.raw):
        assert raw not in text and keyformat.hash_key(raw) not in text and raw[16:] not in text
    assert "key_hash" not in text


def test_secret_fields_given_to_record_event_are_masked(db):
    raw = keyformat.generate_key()
    event = record_event(actor=ACTOR, action="test.secrets", after={
        "password": "hunter2", "key_hash": "abc", "api_token": "t", "nested": [{"secret": 1}], "note": f"leaked {raw}"})
    event.refresh_from_db()
    assert event.after["password"] == event.after["key_hash"] == event.after["api_token"] == "***"
    assert event.after["nested"] == [{"secret": "***"}]
    assert raw not in event.after["note"] and keyformat.display_prefix(raw) in event.after["note"]
