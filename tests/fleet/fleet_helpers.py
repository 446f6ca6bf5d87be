"""Drive the fleet in-process (no worker): reconcile, probe and stop until a condition holds."""
import time

from fleet import health, reconcile, stopping
from fleet.models import Instance
from fleet.states import InstanceState

S = InstanceState


def converge(deployment_id: int, until, *, timeout: float = 60.0):
    """Run the periodic work (sweep, reconcile, health, drain, clean-up) until `until()` is truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reconcile.reconcile_all()
        reconcile.reconcile_deployment(deployment_id)
        health.check_all()
        for instance in Instance.objects.filter(deployment_id=deployment_id):
            if instance.state == S.DRAINING:
                stopping.drain_step(instance.pk)
            if instance.state == S.FAILED:
                stopping.clean_up_failed(instance.pk)
        result = until()
        if result:
            return result
        time.sleep(0.2)
    states = list(Instance.objects.filter(deployment_id=deployment_id).values_list("pk", "state", "failure_reason"))
    raise AssertionError(f"fleet did not converge; instances: {states}")


def states(deployment_id: int) -> dict[int, str]:
    return dict(Instance.objects.filter(deployment_id=deployment_id).values_list("pk", "state"))


def ready_ids(deployment_id: int) -> set[int]:
    return {pk for pk, state in states(deployment_id).items() if state == S.READY}


def wait_until(condition, what, timeout: float = 90.0, interval: float = 0.5):
    """Poll `condition()` until truthy and return it; else fail saying `what` (a text, or a callable for one)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
