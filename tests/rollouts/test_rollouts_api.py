"""The rollouts REST API: starting and steering a rollout, bad input as a 400 naming the field, and tenant
isolation — another tenant's rollouts and deployments answer exactly like missing ones."""
import json

import pytest

from fleet.models import Deployment
from rollouts.models import Rollout, RolloutState
from tests.api.conftest import client_for
from tests.fleet.conftest import make_version

GHOST = 987654321
ACTIONS = ("pause", "resume", "promote", "roll-back")


@pytest.fixture
def fleet(alice, bob):
    a, b = make_version(), make_version(artifact_uri="fleet-tiny-coder-b")
    mine = Deployment.objects.create(tenant=alice.tenant, name="coder", model_version=a, runtime_backend="simulator")
    theirs = Deployment.objects.create(tenant=bob.tenant, name="coder", model_version=a, runtime_backend="simulator")
    their_rollout = Rollout.objects.create(deployment=theirs, from_version=a, to_version=b, state=RolloutState.PENDING,
                                           stages=[{"weight": 1.0, "bake_seconds": 0}])
    return {"a": a, "b": b, "mine": mine, "theirs": theirs, "their_rollout": their_rollout}


@pytest.mark.django_db
@pytest.mark.parametrize("cred", ["api_key", "session"])
def test_an_admin_starts_pauses_resumes_and_rolls_back_a_rollout(alice, fleet, cred):
    client = client_for(cred, alice.user, alice.key)
    started = client.post("/api/v1/rollouts/", {"deployment": fleet["mine"].pk, "to_version": fleet["b"].pk,
                                                "stages": [{"weight": 0.2}, {"weight": 1, "bake_seconds": 60}],
                                                "gates": {"min_requests": 100}}, format="json")
    assert started.status_code == 201, started.content
    body = started.json()
    assert (body["state"], body["tenant"], body["from_version"], body["to_version"]) == (
        "pending", alice.tenant.slug, fleet["a"].pk, fleet["b"].pk)
    assert body["stages"] == [{"weight": 0.2, "bake_seconds": 900}, {"weight": 1.0, "bake_seconds": 60}]
    assert body["gates"]["min_requests"] == 100 and body["gates"]["ttft_p95_ratio"] == 1.2
    assert body["grace"] is None  # only a promoted rollout keeps its old version warm
    url = f"/api/v1/rollouts/{body['id']}/"
    assert client.post(url + "pause/").json()["state"] == "paused"
    assert client.post(url + "resume/").json()["state"] == "pending"
    assert client.post(url + "promote/").status_code == 400  # nothing to promote before traffic moved
    assert client.post(url + "roll-back/", {"reason": "changed my mind"}, format="json").json()["state"] == "aborted"
    listed = client.get(f"/api/v1/rollouts/?deployment={fleet['mine'].pk}").json()["results"]
    assert [r["id"] for r in listed] == [body["id"]]


@pytest.mark.django_db
@pytest.mark.parametrize("body, field", [
    ({"to_version": "x"}, "to_version"),
    ({"to_version": GHOST}, "to_version"),
    ({"strategy": "big-bang"}, "strategy"),
    ({"stages": [{"weight": 2}]}, "stages"),
    ({"stages": [{"weight": 0.5}]}, "stages"),
    ({"gates": {"min_requests": -1}}, "gates"),
    ({"gates": {"nonsense": 1}}, "gates"),
])
def test_bad_input_is_a_400_naming_the_field(alice, fleet, body, field):
    client = client_for("api_key", alice.user, alice.key)
    response = client.post("/api/v1/rollouts/", {"deployment": fleet["mine"].pk, "to_version": fleet["b"].pk, **body},
                           format="json")
    assert response.status_code == 400 and field in response.json(), response.content
    assert not Rollout.objects.filter(deployment=fleet["mine"]).exists()


def _call(client, verb, url):
    response = client.generic(verb, url, json.dumps({}) if verb != "GET" else "", content_type="application/json")
    return response.status_code, response.content


@pytest.mark.django_db
@pytest.mark.parametrize("cred", ["api_key", "session"])
def test_another_tenants_rollouts_answer_like_missing_ones(alice, fleet, cred):
    client = client_for(cred, alice.user, alice.key)
    theirs = fleet["their_rollout"].pk
    for suffix, verb in [("", "GET"), *((f"{action}/", "POST") for action in ACTIONS)]:
        real = _call(client, verb, f"/api/v1/rollouts/{theirs}/{suffix}")
        ghost = _call(client, verb, f"/api/v1/rollouts/{GHOST}/{suffix}")
        assert real == ghost and real[0] == 404, (suffix, real)
    assert client.get("/api/v1/rollouts/").json()["results"] == []
    assert (client.get(f"/api/v1/rollouts/?deployment={fleet['theirs'].pk}").json()
            == client.get(f"/api/v1/rollouts/?deployment={GHOST}").json())
    real = client.post("/api/v1/rollouts/", {"deployment": fleet["theirs"].pk, "to_version": fleet["b"].pk},
                       format="json")
    ghost = client.post("/api/v1/rollouts/", {"deployment": GHOST, "to_version": fleet["b"].pk}, format="json")
    assert real.status_code == 400 and (real.status_code, real.json()) == (ghost.status_code, ghost.json())
    assert Rollout.objects.get(pk=theirs).state == RolloutState.PENDING


@pytest.mark.django_db
def test_a_promoted_rollout_shows_its_old_versions_grace_period(alice, fleet):
    from rollouts import services

    client = client_for("api_key", alice.user, alice.key)
    created = client.post("/api/v1/rollouts/", {"deployment": fleet["mine"].pk, "to_version": fleet["b"].pk,
                                                "grace_seconds": 7200}, format="json").json()
    services.begin_ramping(Rollout.objects.get(pk=created["id"]), baseline={})
    assert client.post(f"/api/v1/rollouts/{created['id']}/promote/").json()["state"] == "promoted"
    grace = client.get(f"/api/v1/rollouts/{created['id']}/").json()["grace"]
    promoted_at = Rollout.objects.get(pk=created["id"]).promoted_at
    from datetime import datetime, timedelta

    assert datetime.fromisoformat(grace["retire_at"]) == promoted_at + timedelta(seconds=7200)
    assert grace["retired_at"] is None and grace["engines_warm"] == 0  # this deployment has no engines up
    assert {"warm_seconds", "idle_cost_usd", "hourly_usd", "priced", "unit"} <= set(grace)
