"""The routing policy is a field of the deployment: the gateway uses it, and a change made through the
service reaches a running gateway over the change bus (no restart, no periodic reload)."""
import collections
import time

import pytest

from fleet import services
from fleet.models import Deployment
from tests.factories import SYSTEM
from tests.gateway_app.conftest import MODEL, client_for, wait_for
from tests.gateway_app.helpers import add_deployment, make_model_version, usage_rows

pytestmark = pytest.mark.django_db(transaction=True)
NO_CACHE = {"x-switchyard-cache": "no"}  # every request must reach an engine


def served_by(client, prompt: str, times: int) -> collections.Counter:
    ids = []
    for _ in range(times):
        raw = client.completions.with_raw_response.create(model=MODEL, prompt=prompt, max_tokens=2,
                                                          extra_headers=NO_CACHE)
        ids.append(raw.headers["x-request-id"])
    rows = wait_for(lambda: (r := usage_rows(request_id__in=ids)) and len(r) == times and r, timeout=10)
    assert rows, "every request is metered"
    return collections.Counter(row.instance_id for row in rows)


def test_the_deployments_policy_routes_and_a_change_applies_without_a_restart(gateway, alice, fast_sims):
    deployment = add_deployment(make_model_version(MODEL), tenant=None, name="pair",
                                urls=[s.url for s in fast_sims], routing_policy="round_robin")
    server = gateway()
    server.wait_until_serving(alice.key.raw, MODEL)
    client = client_for(server, alice.key.raw)

    # Round robin: the same prompt goes to both engines in turn.
    assert sorted(served_by(client, "def same_prompt():", 6).values()) == [3, 3]

    changed_at = time.monotonic()
    services.set_routing_policy(Deployment.objects.get(pk=deployment.pk), actor=SYSTEM,
                                routing_policy="prefix_affinity")
    applied = wait_for(lambda: all(p.policy == "prefix_affinity" for p in server.app.state.snapshot.pools[MODEL]),
                       timeout=5)
    assert applied, "the gateway's snapshot took the new policy"
    print(f"routing policy applied {time.monotonic() - changed_at:.3f} s after commit")
    # Prefix affinity: the same prompt sticks to one engine.
    assert list(served_by(client, "def same_prompt():", 6).values()) == [6]
