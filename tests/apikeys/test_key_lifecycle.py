"""A key's life over HTTP: unknown, expired, revoked, rotated (with grace), used, and its owner leaving or demoted."""
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from apikeys import keyformat, services
from apikeys.models import ApiKey
from audit.models import AuditEvent
from tests.conftest import bearer
from tests.factories import SYSTEM, make_key, make_member, make_user

TENANTS = "/api/v1/tenants/"


def _keys_url(tenant) -> str:
    return f"/api/v1/tenants/{tenant.slug}/keys/"


def _works(raw: str) -> bool:
    status = bearer(raw).get(TENANTS).status_code
    assert status in (200, 401)
    return status == 200


def _stored(raw: str) -> ApiKey:
    return ApiKey.objects.get(key_hash=keyformat.hash_key(raw))


def test_unknown_key_is_401(db):
    response = bearer(keyformat.generate_key()).get(TENANTS)
    assert response.status_code == 401 and "unknown API key" in response.json()["detail"]


def test_key_in_query_string_or_other_header_authenticates_nothing(alice):
    assert bearer("").get(f"{TENANTS}?api_key={alice.key}").status_code == 401
    assert bearer("").get(TENANTS, HTTP_X_API_KEY=alice.key).status_code == 401


def test_expired_key_is_401_after_expires_at(alice):
    raw = make_key(alice.tenant, alice.user, expires_at=timezone.now() + timedelta(hours=1)).raw
    assert _works(raw)
    ApiKey.objects.filter(key_hash=keyformat.hash_key(raw)).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = bearer(raw).get(TENANTS)
    assert response.status_code == 401 and "expired" in response.json()["detail"]


def test_expiry_in_the_past_is_rejected_on_create(alice):
    response = bearer(alice.key).post(_keys_url(alice.tenant), {
        "name": "old", "scopes": ["admin"], "expires_at": "2000-01-01T00:00:00Z"}, format="json")
    assert response.status_code == 400 and "expires_at" in response.json()


def test_revoke_is_immediate_and_idempotent(alice):
    minted = make_key(alice.tenant, alice.user)
    assert _works(minted.raw)
    url = f"{_keys_url(alice.tenant)}{minted.api_key.pk}/revoke/"
    first = bearer(alice.key).post(url)
    assert first.status_code == 200 and first.json()["state"] == "revoked"
    assert bearer(minted.raw).get(TENANTS).status_code == 401
    second = bearer(alice.key).post(url)
    assert second.status_code == 200 and second.json()["revoked_at"] == first.json()["revoked_at"]
    assert bearer(alice.key).delete(f"{_keys_url(alice.tenant)}{minted.api_key.pk}/").status_code == 204
    assert AuditEvent.objects.filter(action="api_key.revoke", target_id=str(minted.api_key.pk)).count() == 1


def test_rotated_key_works_and_old_one_works_until_grace_ends(alice):
    old = make_key(alice.tenant, alice.user)
    response = bearer(alice.key).post(f"{_keys_url(alice.tenant)}{old.api_key.pk}/rotate/", {"grace_seconds": 3600},
                                      format="json")
    assert response.status_code == 201
    new_raw = response.json()["key"]
    assert response.json()["rotated_from"] == old.api_key.prefix and new_raw != old.raw
    assert _works(new_raw) and _works(old.raw)
    deadline = _stored(old.raw).expires_at
    assert timedelta(seconds=3590) < deadline - timezone.now() <= timedelta(seconds=3600)
    ApiKey.objects.filter(pk=old.api_key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert not _works(old.raw) and _works(new_raw)


def test_rotation_with_zero_grace_retires_the_old_key_at_once(alice):
    old = make_key(alice.tenant, alice.user)
    minted = services.rotate_api_key(old.api_key, grace_seconds=0, actor=SYSTEM)
    assert not _works(old.raw) and _works(minted.raw)
    new = minted.api_key
    assert (new.tenant, new.user, new.role, new.scopes) == (alice.tenant, alice.user, old.api_key.role,
                                                            old.api_key.scopes)


def test_rotation_keeps_an_earlier_expiry(alice):
    soon = timezone.now() + timedelta(minutes=5)
    old = make_key(alice.tenant, alice.user, expires_at=soon)
    minted = services.rotate_api_key(old.api_key, grace_seconds=3600, actor=SYSTEM)
    assert _stored(old.raw).expires_at == soon and minted.api_key.expires_at == soon


def test_rotating_a_revoked_key_is_400(alice):
    old = make_key(alice.tenant, alice.user)
    services.revoke_api_key(old.api_key, actor=SYSTEM)
    response = bearer(alice.key).post(f"{_keys_url(alice.tenant)}{old.api_key.pk}/rotate/", {}, format="json")
    assert response.status_code == 400 and "key" in response.json()
    assert ApiKey.objects.filter(rotated_from=old.api_key).count() == 0


def test_rotating_a_key_twice_is_400_not_500(alice):
    old = make_key(alice.tenant, alice.user)
    url = f"{_keys_url(alice.tenant)}{old.api_key.pk}/rotate/"
    assert bearer(alice.key).post(url, {"grace_seconds": 600}, format="json").status_code == 201
    again = bearer(alice.key).post(url, {"grace_seconds": 600}, format="json")
    assert again.status_code == 400 and "key" in again.json()


@pytest.mark.parametrize("grace", [-1, 30 * 24 * 3600 + 1, "soon"])
def test_grace_seconds_out_of_bounds_is_400_naming_the_field(alice, grace):
    old = make_key(alice.tenant, alice.user)
    response = bearer(alice.key).post(f"{_keys_url(alice.tenant)}{old.api_key.pk}/rotate/", {"grace_seconds": grace},
                                      format="json")
    assert response.status_code == 400 and "grace_seconds" in response.json()
    assert _stored(old.raw).expires_at is None


@pytest.mark.parametrize("grace", [-1, 30 * 24 * 3600 + 1])
def test_service_rejects_grace_out_of_bounds(alice, grace):
    old = make_key(alice.tenant, alice.user)
    with pytest.raises(ValidationError) as error:
        services.rotate_api_key(old.api_key, grace_seconds=grace, actor=SYSTEM)
    assert "grace_seconds" in error.value.message_dict


def test_last_used_at_updates_at_most_once_a_minute(alice):
    assert _stored(alice.key).last_used_at is None
    events = AuditEvent.objects.count()
    assert _works(alice.key)
    first = _stored(alice.key).last_used_at
    assert first is not None and timezone.now() - first < timedelta(seconds=30)
    assert _works(alice.key)
    assert _stored(alice.key).last_used_at == first
    ApiKey.objects.filter(key_hash=keyformat.hash_key(alice.key)).update(last_used_at=first - timedelta(seconds=61))
    assert _works(alice.key)
    assert _stored(alice.key).last_used_at > first
    assert AuditEvent.objects.count() == events  # use is telemetry, not an audited change


def test_removing_a_member_revokes_their_keys(alice):
    dana = make_member(alice.tenant, "admin", make_user("dana"))
    keys = [make_key(alice.tenant, dana, role="admin"), make_key(alice.tenant, dana, role="developer")]
    other = make_key(alice.tenant, alice.user)
    membership = dana.memberships.get(tenant=alice.tenant)
    response = bearer(alice.key).delete(f"/api/v1/tenants/{alice.tenant.slug}/members/{membership.pk}/")
    assert response.status_code == 204
    assert not any(_works(k.raw) for k in keys) and _works(other.raw)
    assert all(_stored(k.raw).revoked_at is not None for k in keys)


def test_key_of_a_demoted_owner_acts_with_the_lower_role(alice):
    dana = make_member(alice.tenant, "admin", make_user("dana"))
    raw = make_key(alice.tenant, dana, role="admin").raw
    members = f"/api/v1/tenants/{alice.tenant.slug}/members/"
    invite = {"email": "eve@a.test", "role": "viewer"}
    assert bearer(raw).post(members, invite, format="json").status_code == 201
    membership = dana.memberships.get(tenant=alice.tenant)
    assert bearer(alice.key).patch(f"{members}{membership.pk}/", {"role": "viewer"}, format="json").status_code == 200
    assert bearer(raw).post(members, {"email": "fay@a.test", "role": "viewer"}, format="json").status_code == 403
    assert bearer(raw).post(_keys_url(alice.tenant), {"name": "x", "scopes": ["admin"]},
                            format="json").status_code == 403
    assert bearer(raw).get(members).status_code == 200  # a viewer may still read
