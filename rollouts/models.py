"""Rollouts: traffic of a deployment moved from one model version to another in gated stages (docs/rollouts.md)."""
from django.db import models

DEFAULT_GRACE_SECONDS = 24 * 3600


class RolloutStrategy(models.TextChoices):
    CANARY = "canary", "Canary (staged weights)"
    BLUE_GREEN = "blue-green", "Blue-green (all at once, once the new version is warm)"


class RolloutState(models.TextChoices):
    PENDING = "pending", "Pending (new version warming up)"
    RAMPING = "ramping", "Ramping"
    PAUSED = "paused", "Paused"
    PROMOTED = "promoted", "Promoted"
    ROLLED_BACK = "rolled_back", "Rolled back"
    ABORTED = "aborted", "Aborted"


class StickyBy(models.TextChoices):
    """What keeps one caller on one version while weights are split."""

    SESSION = "session", "Session header, else the request's `user`, else none"
    API_KEY = "api_key", "API key"
    NONE = "none", "Nothing (every request drawn by weight)"


ACTIVE_STATES = (RolloutState.PENDING, RolloutState.RAMPING, RolloutState.PAUSED)
FINISHED_STATES = (RolloutState.PROMOTED, RolloutState.ROLLED_BACK, RolloutState.ABORTED)


class Rollout(models.Model):
    """One move of a deployment from `from_version` to `to_version`: stages, gates, state, current weight."""

    deployment = models.ForeignKey("fleet.Deployment", on_delete=models.CASCADE, related_name="rollouts")
    from_version = models.ForeignKey("models_registry.ModelVersion", on_delete=models.PROTECT, related_name="+")
    to_version = models.ForeignKey("models_registry.ModelVersion", on_delete=models.PROTECT, related_name="+")
    strategy = models.CharField(max_length=16, choices=RolloutStrategy.choices, default=RolloutStrategy.CANARY)
    stages = models.JSONField(help_text='[{"weight": 0.1, "bake_seconds": 900}, …]; the last weight is 1.')
    gates = models.JSONField(default=dict, help_text="rollouts.gates.Gates fields.")
    sticky_by = models.CharField(max_length=16, choices=StickyBy.choices, default=StickyBy.SESSION)
    grace_seconds = models.PositiveIntegerField(
        default=DEFAULT_GRACE_SECONDS, help_text="How long the old version stays warm after a promotion.")
    state = models.CharField(max_length=16, choices=RolloutState.choices, default=RolloutState.PENDING)
    state_reason = models.CharField(max_length=300, blank=True, default="")
    stage_index = models.PositiveSmallIntegerField(default=0)
    weight = models.FloatField(default=0.0, help_text="The new version's share of traffic now (0..1).")
    stage_started_at = models.DateTimeField(null=True, blank=True)
    baseline = models.JSONField(default=dict, blank=True,
                                help_text="The old version's figures before traffic moved (relative gates).")
    last_evaluation = models.JSONField(default=dict, blank=True, help_text="The latest gate figures and verdict.")
    reverses = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
                                 help_text="The promoted rollout this one undoes.")
    created_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    promoted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    previous_retired_at = models.DateTimeField(
        null=True, blank=True, help_text="When the old version's warm instances were let go (grace over).")

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["deployment"], condition=models.Q(state__in=ACTIVE_STATES),
                                    name="one_active_rollout_per_deployment"),
        ]
        indexes = [models.Index(fields=["state"])]

    def __str__(self):
        return f"rollout {self.pk} of {self.deployment}: {self.from_version} → {self.to_version} ({self.state})"

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def tenant(self):
        return self.deployment.tenant
