"""The instance state machine: only the table's transitions happen, each one audited by the fleet."""
import pytest

from audit.models import AuditEvent
from fleet.models import BuiltinRuntime, Deployment, Instance
from fleet.states import ALLOWED_TRANSITIONS, InstanceState, InvalidTransition, check_transition
from fleet.transitions import transition_instance, try_transition

S = InstanceState


def test_every_state_has_a_row_and_terminal_states_lead_nowhere():
    assert set(ALLOWED_TRANSITIONS) == set(S.values)
    assert not ALLOWED_TRANSITIONS[S.STOPPED] and not ALLOWED_TRANSITIONS[S.FAILED]


@pytest.mark.parametrize("current,new", [(S.PENDING, S.READY), (S.READY, S.STARTING), (S.STOPPED, S.STARTING),
                                         (S.FAILED, S.READY), (S.DRAINING, S.READY), (S.READY, S.STOPPED),
                                         (S.STARTING, S.STOPPED)])
def test_transitions_outside_the_table_are_refused(current, new):
    with pytest.raises(InvalidTransition):
        check_transition(current, new)


def test_the_happy_path_is_allowed():
    path = [S.PENDING, S.STARTING, S.READY, S.DRAINING, S.STOPPED]
    for current, new in zip(path, path[1:]):
        check_transition(current, new)


def test_transition_stamps_time_and_records_a_system_audit_event(published_version):
    deployment = Deployment.objects.create(name="d", model_version=published_version,
                                           runtime_backend=BuiltinRuntime.SIMULATOR)
    instance = Instance.objects.create(deployment=deployment)
    moved = transition_instance(instance.pk, S.STARTING, endpoint_url="http://127.0.0.1:1")
    assert moved.state == S.STARTING and moved.starting_at is not None
    event = AuditEvent.objects.get(action="fleet.instance.starting")
    assert event.actor_type == "system" and event.actor_label == "fleet"
    assert event.before["state"] == S.PENDING and event.after["state"] == S.STARTING


def test_a_lost_race_is_a_no_op_not_an_error(published_version):
    deployment = Deployment.objects.create(name="d", model_version=published_version)
    instance = Instance.objects.create(deployment=deployment, state=S.STOPPED)
    assert try_transition(instance.pk, S.FAILED) is None
    assert Instance.objects.get(pk=instance.pk).state == S.STOPPED
