"""Deleting a tenant: platform admins only, and never while deployments (running engines) remain."""
from fleet.models import Deployment
from tenants.models import Tenant
from tests.api.conftest import console_login
from tests.models_registry.registry_helpers import make_version


def test_a_tenant_with_deployments_is_a_400_naming_the_tenant(alice, charlie):
    deployment = Deployment.objects.create(tenant=alice.tenant, name="coder", model_version=make_version(),
                                           runtime_backend="simulator")
    client = console_login(charlie.user)
    response = client.delete(f"/api/v1/tenants/{alice.tenant.slug}/")
    assert response.status_code == 400 and "tenant" in response.json()
    assert Tenant.objects.filter(pk=alice.tenant.pk).exists() and Deployment.objects.filter(pk=deployment.pk).exists()
    deployment.delete()
    assert client.delete(f"/api/v1/tenants/{alice.tenant.slug}/").status_code == 204
    assert not Tenant.objects.filter(pk=alice.tenant.pk).exists()
