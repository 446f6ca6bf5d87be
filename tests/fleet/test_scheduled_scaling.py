"""Scheduled scaling through the API, the service's audit, and a simulator fleet that follows a window."""
from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from fleet import services
from fleet.autoscaling import scaler
from fleet.models import BuiltinRuntime, Deployment, ScalingDecision
from fleet.transitions import FLEET
from tests.fleet.conftest import make_version
from tests.fleet.fleet_helpers import converge, ready_ids

STANDUP = {"days": "mon-fri", "start": "09:00", "end": "09:30", "time_zone": "Europe/Berlin", "min_serving": 3}


@pytest.fixture
def deployment_of_a(tenant_a):
    return Deployment.objects.create(tenant=tenant_a, name="a-sched", model_version=make_version(), min_replicas=1,
                                     max_replicas=3, runtime_backend="simulator")


@pytest.fixture
def owner(alice):
    from tests.conftest import bearer

    return bearer(alice.key)


def url_of(deployment) -> str:
    return f"/api/v1/deployments/{deployment.pk}/scaling/"


def test_a_schedule_is_set_read_back_in_its_stored_form_and_audited(deployment_of_a, owner):
    answer = owner.put(url_of(deployment_of_a), {"enabled": True, "schedule": [{**STANDUP, "days": ["mon", "tue-fri"]}],
                                                 "schedule_lead_seconds": 600}, format="json")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["schedule"] == [STANDUP] and answer.json()["schedule_lead_seconds"] == 600
    assert owner.get(url_of(deployment_of_a)).json()["schedule"] == [STANDUP]
    event = AuditEvent.objects.filter(action="fleet.deployment.scaling_policy").latest("occurred_at")
    assert event.after["schedule"] == [STANDUP] and event.after["schedule_lead_seconds"] == 600
    owner.put(url_of(deployment_of_a), {"schedule": []}, format="json")
    event = AuditEvent.objects.filter(action="fleet.deployment.scaling_policy").latest("occurred_at")
    assert event.before["schedule"] == [STANDUP] and event.after["schedule"] == []


@pytest.mark.parametrize("schedule, message", [
    ([{**STANDUP, "end": "25:00"}], "between 00:00 and 23:59"),
    ([{**STANDUP, "time_zone": "Europe/Atlantis"}], "unknown time zone"),
    ([{**STANDUP, "min_serving": 4}], "above the deployment's max_replicas (3)"),
    ([STANDUP] * 21, "At most 20 windows"),
    ({"days": "mon"}, "Must be a list of windows"),
])
def test_a_bad_schedule_is_a_400_on_the_schedule_field_and_changes_nothing(deployment_of_a, owner, schedule, message):
    answer = owner.put(url_of(deployment_of_a), {"enabled": True, "schedule": schedule}, format="json")
    assert answer.status_code == 400 and set(answer.json()) == {"schedule"}
    assert message in str(answer.json()["schedule"])
    assert not AuditEvent.objects.filter(action="fleet.deployment.scaling_policy").exists()


def test_max_replicas_under_a_windows_min_serving_is_refused_and_changes_nothing(deployment_of_a, owner):
    """As a window above max_replicas is refused: otherwise the window would be capped without a word."""
    saved = owner.put(url_of(deployment_of_a), {"enabled": True, "schedule": [STANDUP]}, format="json")
    assert saved.status_code == 200, saved.json()
    answer = owner.post(f"/api/v1/deployments/{deployment_of_a.pk}/scale/", {"max_replicas": 2}, format="json")
    assert answer.status_code == 400 and set(answer.json()) == {"max_replicas"}, answer.json()
    assert "Window 1 of the scaling schedule asks min_serving 3" in str(answer.json()["max_replicas"])
    deployment_of_a.refresh_from_db()
    assert deployment_of_a.max_replicas == 3
    assert not AuditEvent.objects.filter(action="fleet.deployment.scale").exists()
    scaled = owner.post(f"/api/v1/deployments/{deployment_of_a.pk}/scale/", {"max_replicas": 3, "min_replicas": 2},
                        format="json")
    assert scaled.status_code == 200, scaled.json()


def test_a_lead_beyond_six_hours_is_refused(deployment_of_a, owner):
    answer = owner.put(url_of(deployment_of_a), {"schedule_lead_seconds": 6 * 3600 + 1}, format="json")
    assert answer.status_code == 400 and set(answer.json()) == {"schedule_lead_seconds"}


def test_another_tenant_can_neither_read_nor_set_the_schedule(deployment_of_a, bob):
    from tests.conftest import bearer

    stranger = bearer(bob.key)
    assert stranger.get(url_of(deployment_of_a)).status_code == 404
    assert stranger.put(url_of(deployment_of_a), {"schedule": [STANDUP]}, format="json").status_code == 404


def window_around(opens, closes, min_serving: int) -> dict:
    """A one-off window (this weekday in UTC) from `opens` to `closes`, to the second."""
    return {"days": opens.strftime("%a").lower(), "start": opens.strftime("%H:%M:%S"),
            "end": closes.strftime("%H:%M:%S"), "time_zone": "UTC", "min_serving": min_serving}


def serving(deployment_id: int) -> int:
    return Deployment.objects.get(pk=deployment_id).serving_target


def test_a_window_scales_simulator_engines_up_ahead_of_it_and_back_down_after_it(published_version):
    deployment = services.create_deployment(
        tenant=None, name="standup", model_version=published_version, min_replicas=1, max_replicas=3,
        runtime_backend=BuiltinRuntime.SIMULATOR, actor=FLEET,
        simulator_params={"prefill_ms_per_token": 0.01, "decode_ms_per_token": 1.0})
    converge(deployment.pk, lambda: len(ready_ids(deployment.pk)) == 1)
    now = timezone.now().replace(microsecond=0)
    opens, closes = now + timedelta(seconds=12), now + timedelta(seconds=14)
    # The idle rule alone would take the deployment down again within seconds of any scale-up.
    services.set_scaling_policy(deployment, actor=FLEET, enabled=True, idle_window_seconds=2, cooldown_down_seconds=0,
                                schedule=[window_around(opens, closes, 3)], schedule_lead_seconds=60)
    assert scaler.run_pass()["changed"] == 1  # 12 s before the window, inside its lead
    up = ScalingDecision.objects.get(deployment=deployment)
    assert (up.rule, up.from_serving, up.to_serving) == ("schedule", 1, 3) and up.decided_at < opens
    assert "before it opens (lead 60 s)" in up.reason

    def pass_then(condition):
        return lambda: scaler.run_pass() and condition()

    converge(deployment.pk, pass_then(lambda: len(ready_ids(deployment.pk)) == 3))
    converge(deployment.pk, pass_then(lambda: serving(deployment.pk) == 1 and len(ready_ids(deployment.pk)) == 1),
             timeout=90)
    downs = ScalingDecision.objects.filter(deployment=deployment, action="down").order_by("decided_at")
    assert [(d.rule, d.to_serving) for d in downs] == [("idle", 2), ("idle", 1)]
    assert downs[0].decided_at >= closes  # the floor held until the window closed
