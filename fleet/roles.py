"""Which live instances serve and which wait warm: a pure plan from the targets (reconcile carries it out).

Warm instances are started and healthy but not routed. When the serving target grows, the best
warm instance is promoted (ready before starting before pending) — a routing change only, no cold
start — and the pool is refilled with a new warm instance. When it shrinks, a serving instance
becomes warm if the pool has room (it stays hot for the next burst), else it is drained. What
is left over is drained least useful first: pending, then starting, then the newest ready.
"""
from dataclasses import dataclass, field

from fleet.models import InstanceRole
from fleet.states import InstanceState

S = InstanceState
USEFULNESS: dict[str, int] = {S.READY: 0, S.STARTING: 1, S.PENDING: 2}  # lower is more useful


@dataclass(frozen=True)
class Live:
    pk: int
    state: str
    role: str


@dataclass
class RolePlan:
    promote: list[int] = field(default_factory=list)
    demote: list[int] = field(default_factory=list)
    drain: list[int] = field(default_factory=list)
    create_serving: int = 0
    create_warm: int = 0


def _best_first(instances: list[Live]) -> list[Live]:
    return sorted(instances, key=lambda i: (USEFULNESS[i.state], i.pk))


def _least_useful_first(instances: list[Live]) -> list[Live]:
    return sorted(instances, key=lambda i: (-USEFULNESS[i.state], -i.pk))


def plan_roles(live: list[Live], serving_target: int, warm_target: int, slots_held: int = 0) -> RolePlan:
    """The moves that bring `live` to the targets; `slots_held` new instances wait for a failed one's clean-up."""
    plan = RolePlan()
    serving = [i for i in live if i.role == InstanceRole.SERVING]
    warm = [i for i in live if i.role == InstanceRole.WARM]
    for instance in _best_first(warm)[:max(0, serving_target - len(serving))]:
        plan.promote.append(instance.pk)
        warm.remove(instance)
        serving.append(instance)
    surplus = _best_first(serving)[serving_target:]
    for instance in surplus[:max(0, warm_target - len(warm))]:
        plan.demote.append(instance.pk)
        serving.remove(instance)
        warm.append(instance)
    for group, target in ((serving, serving_target), (warm, warm_target)):
        plan.drain += [i.pk for i in _least_useful_first(group)[:max(0, len(group) - target)]]
    plan.create_serving = max(0, serving_target - len(serving))
    plan.create_warm = max(0, warm_target - len(warm))
    held = min(slots_held, plan.create_serving + plan.create_warm)
    from_serving = min(held, plan.create_serving)
    plan.create_serving -= from_serving
    plan.create_warm -= held - from_serving
    return plan
