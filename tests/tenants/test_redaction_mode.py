"""A tenant admin chooses how the gateway treats secrets in prompts; the change is audited."""
from audit.models import AuditEvent
from tenants.models import Tenant
from tests.conftest import bearer


def test_owner_sets_block_mode_and_it_is_audited(alice):
    client = bearer(alice.key)
    slug = alice.tenant.slug
    assert client.get(f"/api/v1/tenants/{slug}/").json()["redaction_mode"] == "redact"
    response = client.patch(f"/api/v1/tenants/{slug}/", {"redaction_mode": "block"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["redaction_mode"] == "block"
    assert Tenant.objects.get(slug=slug).redaction_mode == "block"
    event = AuditEvent.objects.filter(action="tenant.update", tenant=alice.tenant).latest("seq")
    assert event.before["redaction_mode"] == "redact" and event.after["redaction_mode"] == "block"


def test_unknown_mode_is_a_400(alice):
    response = bearer(alice.key).patch(f"/api/v1/tenants/{alice.tenant.slug}/", {"redaction_mode": "maybe"},
                                       format="json")
    assert response.status_code == 400 and "redaction_mode" in response.json()


def test_other_tenant_cannot_change_it(alice, bob):
    response = bearer(alice.key).patch(f"/api/v1/tenants/{bob.tenant.slug}/", {"redaction_mode": "off"},
                                       format="json")
    assert response.status_code == 404
    assert Tenant.objects.get(pk=bob.tenant.pk).redaction_mode == "redact"
