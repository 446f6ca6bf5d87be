"""Every write service of every app appends exactly the audit events it should, in its own transaction.

The services are found on disk (tests/audit/service_cases.py): a new `services.py` fails the coverage
test until its functions are cases here, read-only helpers or writes listed with why they are not audited.
"""
import json

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import connection, transaction

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
from tests.audit.service_cases import (
    ACTOR,
    AUDITED,
    CASES,
    NOT_AUDITED,
    READ_ONLY,
    build_world,
    public_functions,
    service_modules,
)


@pytest.fixture
def world(db, settings, tmp_path):
    settings.SWITCHYARD_MODEL_ROOT = tmp_path
    return build_world(tmp_path)


def _new_events(since_seq: int) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(seq__gt=since_seq).order_by("seq"))


def _head() -> tuple[int, str]:
    head = AuditChainHead.objects.get(pk=1)
    return head.seq, head.hash


def test_every_services_module_of_every_app_is_found():
    found = {module.__name__ for module in service_modules()}
    assert {"apikeys.services", "audit.services", "fleet.services", "models_registry.services", "quotas.services",
            "tenants.services", "usage.services"} <= found


def test_the_table_covers_every_public_service():
    cases = {name.partition(":")[0] for name in CASES}
    assert public_functions() == cases | set(READ_ONLY)
    assert not cases & set(READ_ONLY)


def test_a_service_case_without_events_says_why():
    assert {name for name, (_, expected) in CASES.items() if not expected} == set(NOT_AUDITED)


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


class WriteLog:
    """Which atomic block each INSERT, UPDATE and DELETE ran in: the first one opened below the caller's."""

    def __init__(self):
        self.depth = len(connection.atomic_blocks)
        self.writes: list[tuple[object, str]] = []

    def __call__(self, execute, sql, params, many, context):
        if sql.lstrip().split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE", "REPLACE"):
            self.writes.append((self._service_block(), sql))
        return execute(sql, params, many, context)

    def _service_block(self):
        if len(connection.atomic_blocks) <= self.depth:
            return None  # written in the caller's transaction, or autocommitted on its own
        # A savepoint id is unique per entry; the block object alone is reused by a decorator.
        return id(connection.atomic_blocks[self.depth]), connection.savepoint_ids[self.depth - 1]


@pytest.mark.parametrize("name", AUDITED)
def test_service_writes_its_changes_and_events_in_one_transaction(world, name):
    log = WriteLog()
    with connection.execute_wrapper(log):
        CASES[name][0](world)
    blocks = {block for block, _ in log.writes}
    assert None not in blocks and len(blocks) == 1, [sql[:80] for block, sql in log.writes if block is None]
    assert any("audit_auditevent" in sql for _, sql in log.writes)


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
        w.invitation, user=w.dev, actor=ACTOR),
    "demote-last-owner": lambda w: tenants.services.change_member_role(
        w.owner.memberships.get(tenant=w.tenant), "admin", actor=ACTOR),
    "remove-last-owner": lambda w: tenants.services.remove_member(w.owner.memberships.get(tenant=w.tenant),
                                                                  actor=ACTOR),
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


@pytest.mark.parametrize("name", ["tenants.create_tenant", "tenants.add_member", "tenants.remove_member",
                                  "apikeys.create_api_key", "apikeys.rotate_api_key", "quotas.update_quota_policy"])
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
