"""`manage.py rollback <deployment>`: traffic back to the previous version, for operators.

A rollout in progress is rolled back (its old version served warm all along); after a promotion, a
reverse rollout to the previous version starts and moves all traffic as soon as that version is warm
(at once during the grace period). The deployment is its id, `<tenant>/<name>` or `shared/<name>`.
"""
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from audit.actor import Actor
from fleet.models import Deployment
from rollouts import services
from rollouts.models import ACTIVE_STATES, Rollout, RolloutState


class Command(BaseCommand):
    help = "Roll a deployment back to its previous model version (docs/rollouts.md)."

    def add_arguments(self, parser):
        parser.add_argument("deployment", help="Deployment id, <tenant-slug>/<name> or shared/<name>.")
        parser.add_argument("--reason", default="", help="Recorded with the rollback in the audit trail.")

    def handle(self, *args, deployment: str, reason: str, **options):
        found = find_deployment(deployment)
        rollout = latest_rollout(found)
        try:
            result = services.roll_back_rollout(rollout, actor=Actor.system("manage.py rollback"), reason=reason)
        except ValidationError as error:
            raise CommandError("; ".join(error.messages)) from None
        if result.pk == rollout.pk:
            self.stdout.write(f"Rolled back rollout {rollout.pk}: all traffic of {found} to {rollout.from_version} "
                              f"({result.state}).")
        elif result.state == RolloutState.RAMPING:
            self.stdout.write(f"Started rollout {result.pk} back to {result.to_version} (undoing rollout "
                              f"{rollout.pk}): it was still warm, all traffic is on it now.")
        else:
            self.stdout.write(f"Started rollout {result.pk} back to {result.to_version} (undoing rollout "
                              f"{rollout.pk}); it moves all traffic once that version is warm.")


def find_deployment(text: str) -> Deployment:
    deployments = Deployment.objects.select_related("tenant", "model_version")
    if text.isdigit():
        found = deployments.filter(pk=int(text)).first()
    else:
        scope, _, name = text.partition("/")
        found = (deployments.filter(tenant__isnull=True, name=name) if scope == "shared"
                 else deployments.filter(tenant__slug=scope, name=name)).first()
    if found is None:
        raise CommandError(f"No deployment {text!r} (give its id, <tenant>/<name> or shared/<name>).")
    return found


def latest_rollout(deployment: Deployment) -> Rollout:
    """The active rollout, else the latest promoted one (undone by a reverse rollout)."""
    rollouts = deployment.rollouts.select_related("from_version", "to_version")
    found = (rollouts.filter(state__in=ACTIVE_STATES).first()
             or rollouts.filter(state=RolloutState.PROMOTED).order_by("-promoted_at").first())
    if found is None:
        raise CommandError(f"{deployment} has no rollout to roll back.")
    return found
