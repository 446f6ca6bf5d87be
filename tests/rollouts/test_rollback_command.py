"""`manage.py rollback <deployment>`: an operator's one command, during a rollout and after a promotion."""
import pytest
from django.core.management import CommandError, call_command

from audit.models import AuditEvent
from rollouts import services, stepping
from rollouts.models import Rollout, RolloutState
from tests.rollouts.conftest import ADMIN
from tests.rollouts.test_rollout_lifecycle import FAST, warm_up


@pytest.mark.django_db
def test_rollback_during_a_rollout_moves_traffic_back(world, capsys):
    rollout = services.start_rollout(world.deployment, to_version=world.b, actor=ADMIN, stages=FAST)
    warm_up(world)
    stepping.step(rollout.pk)
    call_command("rollback", "shared/coder", "--reason", "pager at 3am")
    rollout = Rollout.objects.get(pk=rollout.pk)
    assert (rollout.state, rollout.weight, rollout.state_reason) == (RolloutState.ROLLED_BACK, 0.0, "pager at 3am")
    assert AuditEvent.objects.get(action="rollout.roll_back").actor_label == "manage.py rollback"
    assert "Rolled back rollout" in capsys.readouterr().out


@pytest.mark.django_db
def test_rollback_after_a_promotion_starts_the_reverse_rollout(world):
    rollout = services.start_rollout(world.deployment, to_version=world.b, actor=ADMIN, stages=FAST)
    warm_up(world)
    stepping.step(rollout.pk)
    services.promote_rollout(Rollout.objects.get(pk=rollout.pk), actor=ADMIN)
    call_command("rollback", str(world.deployment.pk))
    reverse = Rollout.objects.get(reverses=rollout)
    # A is warm (its grace period): all traffic is back on it as the command returns.
    assert (reverse.to_version_id, reverse.state, reverse.weight) == (world.a.pk, RolloutState.RAMPING, 1.0)


@pytest.mark.django_db
def test_rollback_without_a_rollout_or_deployment_says_so(world):
    with pytest.raises(CommandError, match="no rollout to roll back"):
        call_command("rollback", "shared/coder")
    with pytest.raises(CommandError, match="No deployment 'acme/nothing'"):
        call_command("rollback", "acme/nothing")
