"""The main tenant-admin journey over the REST API, end to end."""
from apikeys.models import ApiKey
from audit.models import AuditEvent
from tests.conftest import bearer
from tests.factories import make_member, make_user


def test_owner_invites_member_mints_key_and_sets_quota(alice):
    client = bearer(alice.key)
    slug = alice.tenant.slug
    invited = client.post(f"/api/v1/tenants/{slug}/members/", {"email": "dev@a.test", "role": "developer"},
                          format="json")
    assert invited.status_code == 201 and invited.json()["status"] == "pending", invited.content
    member = make_member(alice.tenant, "developer", make_user("dev-a"))
    for_other = client.post(f"/api/v1/tenants/{slug}/keys/", {"name": "ide", "scopes": ["inference"],
                                                               "user_id": member.pk}, format="json")
    assert for_other.status_code == 403  # a personal key is minted by its owner only
    key = client.post(f"/api/v1/tenants/{slug}/keys/", {"name": "ci", "scopes": ["inference"]}, format="json")
    assert key.status_code == 201, key.content
    raw = key.json()["key"]
    assert raw.startswith("sy_live_")
    listed = client.get(f"/api/v1/tenants/{slug}/keys/").json()
    assert all("key" not in row for row in listed["results"])
    quota = client.post(f"/api/v1/tenants/{slug}/quotas/", {"api_key_id": key.json()["id"], "requests_per_minute": 30},
                        format="json")
    assert quota.status_code == 201, quota.content
    bad = client.patch(f"/api/v1/tenants/{slug}/quotas/{quota.json()['id']}/", {"tokens_per_minute": -5}, format="json")
    assert bad.status_code == 400 and "tokens_per_minute" in bad.json()
    assert not ApiKey.objects.filter(key_hash=raw).exists()
    assert AuditEvent.objects.filter(action="api_key.create", tenant=alice.tenant).count() == 2


def test_other_tenant_is_not_found(alice, bob):
    client = bearer(alice.key)
    assert client.get(f"/api/v1/tenants/{bob.tenant.slug}/").status_code == 404
    assert client.get(f"/api/v1/tenants/{bob.tenant.slug}/keys/").status_code == 404
    slugs = [t["slug"] for t in client.get("/api/v1/tenants/").json()["results"]]
    assert slugs == [alice.tenant.slug]


def test_no_credentials_is_401(api, alice):
    assert api.get("/api/v1/tenants/").status_code == 401
    assert api.get(f"/api/v1/tenants/{alice.tenant.slug}/keys/").status_code == 401
