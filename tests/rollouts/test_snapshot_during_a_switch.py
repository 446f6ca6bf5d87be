"""A gateway snapshot loaded while a rollout switches traffic sees the switch whole or not at all.

The real-vLLM blue-green journey once answered four 503s ("No healthy instance") at the moment of the
switch: the snapshot load read the rollouts' weights (none yet: pending), then the blue-green switch
committed (B's engines serving, A's demoted to warm, all weight on B), then the load read the deployment's
engines — B's serving but not A's version, A's not serving — and built a pool with no engine. Here the
switch is committed from another connection at exactly that point of a load.
"""
import threading

import pytest
from django.db import connection

from fleet.models import Instance, InstanceRole
from gateway.config.snapshot_loader import load_snapshot, version_marker
from rollouts import selectors, stepping
from tests.rollouts.test_rollout_lifecycle import GATES, refresh, start, warm_up

BLUE_GREEN = [{"weight": 1.0, "bake_seconds": 30}]


def committed_elsewhere(action) -> None:
    """Run `action` in a thread of its own: its own database connection, committed when it returns."""
    failures = []

    def run():
        try:
            action()
        except Exception as error:  # noqa: BLE001 - re-raised in the test's thread
            failures.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive() and not failures, failures


def serving_upstreams(world) -> set[int]:
    pools = load_snapshot(version_marker(), 60).pools[world.a.model.name]
    return {upstream.instance_id for pool in pools for upstream in pool.upstreams}


@pytest.mark.django_db(transaction=True)
def test_a_blue_green_switch_committed_in_the_middle_of_a_load_is_seen_whole_or_not_at_all(world, monkeypatch):
    rollout = start(world, strategy="blue-green", stages=BLUE_GREEN, gates=GATES)
    warm_up(world)  # B's engines ready, warm: not routed
    engines_of = {version.pk: set(Instance.objects.filter(deployment=world.deployment, model_version=version)
                                  .values_list("pk", flat=True)) for version in (world.a, world.b)}
    assert serving_upstreams(world) == engines_of[world.a.pk]

    weights_read = selectors.routing_weights

    def weights_then_the_switch():
        found = weights_read()
        committed_elsewhere(lambda: stepping.step(rollout.pk))  # the switch lands here, mid-load
        return found

    monkeypatch.setattr(selectors, "routing_weights", weights_then_the_switch)
    during = serving_upstreams(world)
    monkeypatch.setattr(selectors, "routing_weights", weights_read)

    assert refresh(rollout).weight == 1.0
    assert set(Instance.objects.filter(pk__in=engines_of[world.a.pk]).values_list("role", flat=True)) == \
        {InstanceRole.WARM}  # the switch did commit, A's engines demoted in it
    assert during == engines_of[world.a.pk]  # the load saw the database from before the switch, whole
    assert serving_upstreams(world) == engines_of[world.b.pk]  # the next load sees it after, whole
