"""The console's rollout page: its buttons go through the rollouts services (audited), bad input is a message."""
from django.urls import reverse

from audit.models import AuditEvent
from rollouts.models import Rollout, RolloutState
from tests.console.conftest import make_version


def _start(client, world, **fields):
    return client.post(reverse("console:rollout-start", args=[world.dep_a.pk]), {
        "to_version": world.next_version.pk, "strategy": "canary", "sticky_by": "session", "grace_seconds": 60,
        **fields}, follow=True)


def _act(client, world, rollout, action):
    return client.post(reverse("console:rollout-action", args=[world.dep_a.pk, rollout.pk, action]), follow=True)


def test_bad_stages_are_a_message_and_start_nothing(world, login):
    world.next_version = make_version()
    response = _start(login("alice"), world, stages="0.5:60, 0.2:60")
    assert response.status_code == 200
    assert "Weights must rise" in response.content.decode()
    assert not Rollout.objects.exists()


def test_start_pause_resume_and_promote_are_audited_services(world, login):
    world.next_version = make_version()
    client = login("alice")
    assert "Rollout started" in _start(client, world, stages="0.2:30, 1:0", min_requests="7").content.decode()
    rollout = Rollout.objects.get(deployment=world.dep_a)
    assert rollout.gates["min_requests"] == 7 and rollout.stages[0] == {"weight": 0.2, "bake_seconds": 30}
    from rollouts.services import begin_ramping

    begin_ramping(rollout, baseline={})
    for action, state in (("pause", RolloutState.PAUSED), ("resume", RolloutState.RAMPING),
                          ("promote", RolloutState.PROMOTED)):
        assert _act(client, world, rollout, action).status_code == 200
        rollout.refresh_from_db()
        assert rollout.state == state, action
    world.dep_a.refresh_from_db()
    assert world.dep_a.model_version == world.next_version
    live = client.get(reverse("console:rollout-live", args=[world.dep_a.pk])).content.decode()
    assert 'id="rollout-grace"' in live and "kept warm (a rollback needs no cold start)" in live
    assert "idle cost so far" in live
    actions = list(AuditEvent.objects.filter(action__startswith="rollout.", actor__username="alice")
                   .values_list("action", flat=True))
    assert sorted(actions) == ["rollout.pause", "rollout.promote", "rollout.resume", "rollout.start"]
    # A second promote is refused as the API refuses it: a message, no change.
    assert "Not possible while the rollout is promoted" in _act(client, world, rollout, "promote").content.decode()


def test_the_live_panel_shows_a_reader_the_weights(world, login):
    from tests.api.matrix_world import make_rollout

    world.next_version = make_version()
    make_rollout(world.dep_a, type("Versions", (), {"main": world.version, "next": world.next_version}))
    html = login("victor").get(reverse("console:rollout-live", args=[world.dep_a.pk])).content.decode()
    assert 'data-weight="B">10.0 %' in html and 'data-weight="A">90.0 %' in html
    page = login("victor").get(reverse("console:rollout", args=[world.dep_a.pk])).content.decode()
    assert "Roll back" not in page and "Start a rollout" not in page
