"""A tenant created after the gateway's last snapshot is served at once, not refused until the next poll."""
from __future__ import annotations

from tests.factories import make_member, make_tenant, make_user
from tests.gateway_app.conftest import MODEL, client_for, inference_key


def test_a_key_of_a_tenant_created_after_the_snapshot_works_at_once(gateway, alice, shared_pool):
    server = gateway(refresh_seconds=60)  # the periodic poll would not catch up within the test
    server.wait_until_serving(alice.key.raw, MODEL)
    loads = server.app.refresher.loads
    carol_tenant = make_tenant("tenant-c")
    carol = make_member(carol_tenant, "owner", make_user("carol"))
    key = inference_key(carol_tenant, user=carol)

    client = client_for(server, key.raw)
    assert [m.id for m in client.models.list().data] == [MODEL]
    answer = client.completions.create(model=MODEL, prompt="def add(a, b):", max_tokens=2)
    assert answer.usage.completion_tokens == 2
    assert server.app.refresher.loads == loads + 1  # one on-demand refresh served both requests


def test_a_key_bound_to_no_tenant_is_still_refused(gateway, alice, shared_pool):
    server = gateway(refresh_seconds=60)
    server.wait_until_serving(alice.key.raw, MODEL)
    staff = make_user("operator")
    staff.is_staff = True
    staff.save()
    # Tenant-less keys are platform keys (apikeys.services mints them with exactly the admin scope);
    # one that also holds inference (an older row) still serves no one: inference needs a tenant.
    from apikeys.models import ApiKey
    from apikeys.scopes import Scope

    loose = inference_key(None, user=staff, scopes=(Scope.ADMIN,))
    ApiKey.objects.filter(pk=loose.api_key.pk).update(scopes=[Scope.ADMIN, Scope.INFERENCE])
    response = server.post("/v1/completions", loose.raw, {"model": MODEL, "prompt": "x", "max_tokens": 1})
    assert response.status_code == 403 and response.json()["error"]["code"] == "tenant_required"
