"""/api/v1/deployments/: tenant isolation, who may deploy what, and clear 400s for bad specs."""
import pytest

from audit.models import AuditEvent
from fleet.models import Deployment, DeploymentStatus, Instance
from fleet.states import InstanceState
from tests.conftest import bearer
from tests.factories import make_key, make_member

URL = "/api/v1/deployments/"


def spec(version, **overrides):
    return {"name": "coder", "model_version": version.pk, "runtime_backend": "simulator", "min_replicas": 1,
            "max_replicas": 2, **overrides}


def test_tenant_admin_deploys_for_own_tenant_and_the_write_is_audited(alice, published_version):
    response = bearer(alice.key).post(URL, spec(published_version, tenant=alice.tenant.slug), format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["tenant"] == alice.tenant.slug and body["status"] == "active" and body["instances"] == []
    assert AuditEvent.objects.filter(action="fleet.deployment.create", tenant=alice.tenant).count() == 1


def test_tenant_b_gets_404_on_tenant_a_deployment(alice, bob, published_version):
    created = bearer(alice.key).post(URL, spec(published_version, tenant=alice.tenant.slug), format="json").json()
    client = bearer(bob.key)
    assert client.get(f"{URL}{created['id']}/").status_code == 404
    assert client.post(f"{URL}{created['id']}/scale/", {"min_replicas": 0}, format="json").status_code == 404
    assert client.delete(f"{URL}{created['id']}/").status_code == 404
    assert client.get(URL).json()["results"] == []
    assert client.post(URL, spec(published_version, tenant=alice.tenant.slug), format="json").status_code == 400


def test_only_platform_admins_create_or_see_shared_pools(alice, staff_client, published_version):
    assert bearer(alice.key).post(URL, spec(published_version), format="json").status_code == 403
    created = staff_client.post(URL, spec(published_version), format="json")
    assert created.status_code == 201 and created.json()["tenant"] is None
    assert bearer(alice.key).get(f"{URL}{created.json()['id']}/").status_code == 404
    assert [d["id"] for d in staff_client.get(URL).json()["results"]] == [created.json()["id"]]


def test_developers_may_look_but_not_deploy(alice, published_version):
    developer = make_member(alice.tenant, "developer")
    key = make_key(alice.tenant, developer, role="developer").raw
    assert bearer(key).post(URL, spec(published_version, tenant=alice.tenant.slug), format="json").status_code == 403
    assert bearer(key).get(URL).status_code == 200


@pytest.mark.parametrize("overrides,field", [
    ({"min_replicas": 3, "max_replicas": 2}, "max_replicas"),
    ({"min_replicas": -1}, "min_replicas"),
    ({"max_replicas": 1000}, "max_replicas"),
    ({"runtime_backend": "local", "tensor_parallel_size": 2}, "tensor_parallel_size"),
    ({"runtime_backend": "local", "pipeline_parallel_size": 2}, "pipeline_parallel_size"),
    ({"tensor_parallel_size": 16, "pipeline_parallel_size": 8}, "tensor_parallel_size"),
    ({"tensor_parallel_size": 0}, "tensor_parallel_size"),
    ({"simulator_params": {"port": 1}}, "simulator_params"),
    ({"simulator_params": {"max_num_seqs": "many"}}, "simulator_params"),
    ({"runtime_backend": "local", "simulator_params": {"max_num_seqs": 2}}, "simulator_params"),
    ({"runtime_backend": "kubernetes"}, "runtime_backend"),
    ({"model_version": 999999}, "model_version"),
    ({"tenant": "no-such-tenant"}, "tenant"),
    ({"fallback_model_name": "no-such-model"}, "fallback_model_name"),
    ({"routing_policy": "fastest"}, "routing_policy"),
    ({"routing_policy": None}, "routing_policy"),
])
def test_bad_specs_are_400s_naming_the_field(alice, published_version, overrides, field):
    body = spec(published_version, **{"tenant": alice.tenant.slug, **overrides})
    response = bearer(alice.key).post(URL, body, format="json")
    assert response.status_code == 400 and field in response.json(), response.content
    assert not Deployment.objects.exists()


def test_an_unpublished_version_cannot_be_deployed(alice, draft_version):
    response = bearer(alice.key).post(URL, spec(draft_version, tenant=alice.tenant.slug), format="json")
    assert response.status_code == 400 and "published" in str(response.json()["model_version"])


def test_scale_delete_and_instance_actions_change_only_desired_state(alice, published_version):
    client = bearer(alice.key)
    created = client.post(URL, spec(published_version, tenant=alice.tenant.slug), format="json").json()
    deployment = Deployment.objects.get(pk=created["id"])
    scaled = client.post(f"{URL}{deployment.pk}/scale/", {"min_replicas": 2, "max_replicas": 3}, format="json")
    assert scaled.status_code == 200 and scaled.json()["target_replicas"] == 2
    bad = client.post(f"{URL}{deployment.pk}/scale/", {"min_replicas": 5}, format="json")
    assert bad.status_code == 400 and "max_replicas" in bad.json()
    ready = Instance.objects.create(deployment=deployment, state=InstanceState.READY, endpoint_url="http://x")
    drained = client.post(f"{URL}{deployment.pk}/instances/{ready.pk}/drain/")
    assert drained.status_code == 202 and drained.json()["state"] == "draining"
    assert client.post(f"{URL}{deployment.pk}/instances/{ready.pk}/restart/").status_code == 409
    deleted = client.delete(f"{URL}{deployment.pk}/")
    assert deleted.status_code == 202 and deleted.json()["status"] == DeploymentStatus.DELETING


def test_no_credentials_is_401(api):
    assert api.get(URL).status_code == 401


def test_a_fallback_model_is_stored_and_audited(alice, published_version):
    from audit.models import AuditEvent
    from models_registry.models import Model

    Model.objects.create(name="small-coder")
    body = spec(published_version, tenant=alice.tenant.slug, fallback_model_name="small-coder")
    response = bearer(alice.key).post(URL, body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["fallback_model_name"] == "small-coder"
    event = AuditEvent.objects.get(action="fleet.deployment.create")
    assert event.after["fallback_model_name"] == "small-coder"
    own = spec(published_version, tenant=alice.tenant.slug, name="again",
               fallback_model_name=published_version.model.name)
    assert "fallback_model_name" in bearer(alice.key).post(URL, own, format="json").json()


def test_the_routing_policy_is_chosen_at_deploy_and_changed_with_an_audit_event(alice, published_version):
    client = bearer(alice.key)
    created = client.post(URL, spec(published_version, tenant=alice.tenant.slug, routing_policy="least_outstanding"),
                          format="json").json()
    assert created["routing_policy"] == "least_outstanding"
    routing = f"{URL}{created['id']}/routing/"
    assert client.get(routing).json() == {"routing_policy": "least_outstanding"}
    changed = client.put(routing, {"routing_policy": "latency_ewma"}, format="json")
    assert changed.status_code == 200 and changed.json() == {"routing_policy": "latency_ewma"}
    event = AuditEvent.objects.get(action="fleet.deployment.routing_policy")
    assert (event.before["routing_policy"], event.after["routing_policy"]) == ("least_outstanding", "latency_ewma")
    for bad in ({"routing_policy": "fastest"}, {}, {"routing_policy": ["round_robin"]}):
        response = client.put(routing, bad, format="json")
        assert response.status_code == 400 and "routing_policy" in response.json(), response.content
    assert Deployment.objects.get(pk=created["id"]).routing_policy == "latency_ewma"


def test_a_new_deployment_routes_by_prefix_affinity_unless_told_otherwise(alice, published_version):
    created = bearer(alice.key).post(URL, spec(published_version, tenant=alice.tenant.slug), format="json").json()
    assert created["routing_policy"] == "prefix_affinity"


def test_the_fleets_routing_choices_are_the_gateways_policies():
    from fleet.models import RoutingPolicyName
    from gateway.config.snapshot import DEFAULT_POLICY
    from gateway.routing.policies import PolicyName

    assert set(RoutingPolicyName.values) == {p.value for p in PolicyName}
    assert Deployment._meta.get_field("routing_policy").default == DEFAULT_POLICY
