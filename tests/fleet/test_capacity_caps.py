"""Platform caps: replicas per deployment and a tenant's quota of instances and GPUs, checked at the API
and the console with a 400 (or a flashed message) that names the limit."""
import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from fleet import services
from fleet.models import Deployment
from fleet.transitions import FLEET
from quotas.models import QuotaPolicy
from tests.conftest import bearer

URL = "/api/v1/deployments/"


def spec(version, tenant, **overrides):
    return {"name": overrides.pop("name", "coder"), "model_version": version.pk, "runtime_backend": "simulator",
            "tenant": tenant.slug, "min_replicas": 1, "max_replicas": 2, **overrides}


def tenant_policy(tenant) -> QuotaPolicy:
    return QuotaPolicy.objects.get(tenant=tenant, api_key=None, user=None)


def test_the_overcommitting_call_is_refused_with_the_limit_named(staff_client, published_version):
    """The issue's call: a shared pool with min 21 and a warm pool of 18."""
    response = staff_client.post(URL,
                                 {"name": "pool", "model_version": published_version.pk, "runtime_backend": "local",
                                "min_replicas": 21, "warm_pool_size": 18}, format="json")
    assert response.status_code == 400, response.content
    assert "SWITCHYARD_FLEET_MAX_REPLICAS_PER_DEPLOYMENT" in response.json()["min_replicas"][0]
    assert not Deployment.objects.exists()


def test_scaling_past_the_per_deployment_cap_is_400(settings, alice, published_version):
    settings.SWITCHYARD_FLEET_MAX_REPLICAS_PER_DEPLOYMENT = 3
    created = bearer(alice.key).post(URL, spec(published_version, alice.tenant), format="json").json()
    response = bearer(alice.key).post(f"{URL}{created['id']}/scale/", {"max_replicas": 4}, format="json")
    assert response.status_code == 400
    assert response.json()["max_replicas"] == [
        "At most 3 replicas per deployment (the platform limit SWITCHYARD_FLEET_MAX_REPLICAS_PER_DEPLOYMENT)."]


def test_a_tenant_cannot_pass_the_platform_instance_quota_across_deployments(settings, alice, published_version):
    settings.SWITCHYARD_FLEET_MAX_INSTANCES_PER_TENANT = 5
    client = bearer(alice.key)
    assert client.post(URL, spec(published_version, alice.tenant, name="a", max_replicas=3),
                       format="json").status_code == 201
    response = client.post(URL, spec(published_version, alice.tenant, name="b", max_replicas=3), format="json")
    assert response.status_code == 400
    assert response.json()["max_replicas"] == [
        "Tenant tenant-a may hold at most 5 instances (the platform limit SWITCHYARD_FLEET_MAX_INSTANCES_PER_TENANT); "
        "its other deployments may already hold 3, so this one can have at most 2 max_replicas."]
    assert client.post(URL, spec(published_version, alice.tenant, name="b", max_replicas=2),
                       format="json").status_code == 201


def test_platform_admins_set_a_tenants_quota_and_its_own_admins_cannot_raise_it(alice, staff_client, published_version):
    policy_url = f"/api/v1/tenants/{alice.tenant.slug}/quotas/{tenant_policy(alice.tenant).pk}/"
    denied = bearer(alice.key).patch(policy_url, {"max_instances": 100}, format="json")
    assert denied.status_code == 403 and "platform admins" in denied.json()["detail"]
    assert bearer(alice.key).patch(policy_url, {"requests_per_minute": 60}, format="json").status_code == 200
    granted = staff_client.patch(policy_url, {"max_instances": 2, "max_gpus": 4}, format="json")
    assert granted.status_code == 200 and granted.json()["max_instances"] == 2
    assert bearer(alice.key).get(policy_url).json()["max_gpus"] == 4  # readable by the tenant
    response = bearer(alice.key).post(URL, spec(published_version, alice.tenant, max_replicas=3), format="json")
    assert response.status_code == 400 and "its quota policy's max_instances" in response.json()["max_replicas"][0]


def test_gpu_quota_counts_replicas_times_parallel_sizes_of_gpu_deployments(alice, staff_client, published_version):
    staff_client.patch(f"/api/v1/tenants/{alice.tenant.slug}/quotas/{tenant_policy(alice.tenant).pk}/", {"max_gpus": 4},
                format="json")
    gpu = {"gpu_type": "A100-80G", "tensor_parallel_size": 2}
    response = bearer(alice.key).post(URL, spec(published_version, alice.tenant, max_replicas=3, **gpu), format="json")
    assert response.status_code == 400
    assert "at most 4 GPUs (its quota policy's max_gpus)" in response.json()["max_replicas"][0]
    assert bearer(alice.key).post(URL, spec(published_version, alice.tenant, max_replicas=2, **gpu),
                                  format="json").status_code == 201
    cpu = spec(published_version, alice.tenant, name="cpu", max_replicas=3)  # CPU replicas hold no GPU
    assert bearer(alice.key).post(URL, cpu, format="json").status_code == 201


def test_capacity_quotas_belong_to_the_whole_tenant_not_a_key(alice, staff_client):
    response = staff_client.post(f"/api/v1/tenants/{alice.tenant.slug}/quotas/",
                          {"api_key_id": alice.tenant.api_keys.first().pk, "max_instances": 3}, format="json")
    assert response.status_code == 400 and "whole tenant" in response.json()["max_instances"][0]


def test_a_tenant_over_a_lowered_quota_can_still_scale_down(settings, alice, published_version):
    deployment = services.create_deployment(tenant=alice.tenant, name="big", model_version=published_version,
                                            actor=FLEET, runtime_backend="simulator", min_replicas=1, max_replicas=6)
    settings.SWITCHYARD_FLEET_MAX_INSTANCES_PER_TENANT = 2
    settings.SWITCHYARD_FLEET_MAX_REPLICAS_PER_DEPLOYMENT = 4
    assert services.scale_deployment(deployment, max_replicas=5, actor=FLEET).max_replicas == 5
    with pytest.raises(ValidationError):
        services.scale_deployment(deployment, max_replicas=6, actor=FLEET)


def test_the_console_deploy_form_flashes_the_limit(settings, alice, published_version, client):
    settings.SWITCHYARD_FLEET_MAX_REPLICAS_PER_DEPLOYMENT = 2
    client.force_login(alice.user)
    page = client.post("/console/fleet/deploy",
                       {"tenant": alice.tenant.slug, "name": "c", "runtime_backend": "simulator",
                                                 "model_version": published_version.pk, "min_replicas": 1,
                                                 "max_replicas": 3, "warm_pool_size": 0, "gpu_type": ""}, follow=True)
    assert "At most 2 replicas per deployment" in page.content.decode()
    assert not Deployment.objects.exists()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="two writers at once need a server database")
@pytest.mark.django_db(transaction=True)
def test_two_deployments_created_at_once_cannot_both_fit_under_the_quota(settings, tenant_a, published_version):
    settings.SWITCHYARD_FLEET_MAX_INSTANCES_PER_TENANT = 3
    barrier, outcomes = threading.Barrier(2), []

    def create(name):
        try:
            barrier.wait()
            services.create_deployment(tenant=tenant_a, name=name, model_version=published_version, actor=FLEET,
                                       runtime_backend="simulator", min_replicas=0, max_replicas=2)
            outcomes.append("created")
        except ValidationError as exc:
            outcomes.append(exc.message_dict["max_replicas"][0])
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(name,)) for name in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    refused = [o for o in outcomes if o != "created"]
    assert outcomes.count("created") == 1 and len(refused) == 1 and "at most 1 max_replicas" in refused[0]
    assert Deployment.objects.count() == 1
