"""Rollout tasks: thin wrappers over rollouts.stepping (ids in, small dicts out)."""
from celery import shared_task

from rollouts import stepping


@shared_task(name="rollouts.step_all", time_limit=60, soft_time_limit=50)
def step_all() -> dict:
    """Periodic: step every active rollout (and retire old versions whose grace is over)."""
    return stepping.step_all()


@shared_task(name="rollouts.step", time_limit=30, soft_time_limit=25)
def step(rollout_id: int) -> str:
    """Step one rollout now (after a change to it, not waiting for the next periodic pass)."""
    return stepping.step(rollout_id)
