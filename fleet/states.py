"""The instance state machine: states and the only transitions allowed between them."""
from django.db import models


class InstanceState(models.TextChoices):
    PENDING = "pending", "Pending"
    STARTING = "starting", "Starting"
    READY = "ready", "Ready"
    DRAINING = "draining", "Draining"
    STOPPED = "stopped", "Stopped"
    FAILED = "failed", "Failed"


S = InstanceState
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    # Draining a pending instance whose engine a worker is starting right now (fleet/launching.py).
    S.PENDING: frozenset({S.STARTING, S.DRAINING, S.STOPPED, S.FAILED}),
    # A launched engine is stopped only through draining: `stopped` promises its process is gone.
    S.STARTING: frozenset({S.READY, S.DRAINING, S.FAILED}),
    S.READY: frozenset({S.DRAINING, S.FAILED}),
    S.DRAINING: frozenset({S.STOPPED, S.FAILED}),
    S.STOPPED: frozenset(),
    S.FAILED: frozenset(),
}
# Instances that count towards a deployment's replicas.
LIVE_STATES = frozenset({S.PENDING, S.STARTING, S.READY})
# Instances whose process may exist and must be watched.
RUNNING_STATES = frozenset({S.STARTING, S.READY, S.DRAINING})
TERMINAL_STATES = frozenset({S.STOPPED, S.FAILED})
# The timestamp field set on entering each state.
STATE_TIMESTAMP: dict[str, str] = {S.STARTING: "starting_at", S.READY: "ready_at", S.DRAINING: "draining_at",
                                   S.STOPPED: "stopped_at", S.FAILED: "failed_at"}


class InvalidTransition(Exception):
    """A state change the table does not allow."""


def check_transition(current: str, new: str) -> None:
    """Raise InvalidTransition unless `current → new` is in the table."""
    if new not in ALLOWED_TRANSITIONS[current]:
        raise InvalidTransition(f"instance cannot go from {current} to {new}")
