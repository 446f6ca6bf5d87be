"""A tenant admin turns cancelling superseded editor completions on or off; the change is audited."""
from django.urls import reverse

from audit.models import AuditEvent
from tenants.models import Tenant
from tests.conftest import bearer


def test_it_is_on_by_default_and_an_owner_turns_it_off_audited(alice):
    client, slug = bearer(alice.key), alice.tenant.slug
    assert client.get(f"/api/v1/tenants/{slug}/").json()["cancel_superseded"] is True
    response = client.patch(f"/api/v1/tenants/{slug}/", {"cancel_superseded": False}, format="json")
    assert response.status_code == 200 and response.json()["cancel_superseded"] is False
    assert Tenant.objects.get(slug=slug).cancel_superseded is False
    event = AuditEvent.objects.filter(action="tenant.update", tenant=alice.tenant).latest("seq")
    assert event.before["cancel_superseded"] is True and event.after["cancel_superseded"] is False


def test_a_value_that_is_not_a_boolean_is_a_400(alice):
    response = bearer(alice.key).patch(f"/api/v1/tenants/{alice.tenant.slug}/", {"cancel_superseded": "sometimes"},
                                       format="json")
    assert response.status_code == 400 and "cancel_superseded" in response.json()


def test_tenant_b_gets_404(alice, bob):
    response = bearer(alice.key).patch(f"/api/v1/tenants/{bob.tenant.slug}/", {"cancel_superseded": False},
                                       format="json")
    assert response.status_code == 404
    assert Tenant.objects.get(pk=bob.tenant.pk).cancel_superseded is True


def test_the_console_toggle_goes_through_the_service(alice, bob, client):
    client.force_login(alice.user)
    page = client.get(reverse("console:tenant", args=[alice.tenant.slug])).content.decode()
    assert 'name="cancel_superseded"' in page and "checked" in page.split('id="cancel-superseded"')[1][:40]
    answer = client.post(reverse("console:tenant-supersession", args=[alice.tenant.slug]), {})  # unchecked box
    assert answer.status_code == 302
    assert Tenant.objects.get(pk=alice.tenant.pk).cancel_superseded is False
    event = AuditEvent.objects.filter(action="tenant.update", tenant=alice.tenant).latest("seq")
    assert event.after["cancel_superseded"] is False and event.actor_label == alice.user.username
    client.post(reverse("console:tenant-supersession", args=[alice.tenant.slug]), {"cancel_superseded": "on"})
    assert Tenant.objects.get(pk=alice.tenant.pk).cancel_superseded is True
    other = client.post(reverse("console:tenant-supersession", args=[bob.tenant.slug]), {})
    assert other.status_code == 404 and Tenant.objects.get(pk=bob.tenant.pk).cancel_superseded is True
