"""Health checks: is the engine alive, answering `/health` within a deadline, and what its metrics say.

A process that is alive but hung fails the probe by timeout; N consecutive failures mark it
failed. A `starting` instance is not counted against N, but it has a start-up deadline.

A pass observes every engine concurrently (network and /proc only, at most
SWITCHYARD_FLEET_PROBE_CONCURRENCY at once, so a fleet of hung engines costs one timeout, not one
per engine), then records and acts on what it saw one instance at a time. A lease keeps a second
pass from starting while one runs. Backends that observe their engines themselves (a watch on
Kubernetes pods) are left out.
"""
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.change_bus import publish_signals
from fleet import leases, metrics
from fleet.models import Instance
from fleet.runtime import get_backend
from fleet.states import RUNNING_STATES, InstanceState
from fleet.transitions import fail_instance, record_probe, try_transition

logger = logging.getLogger(__name__)
S = InstanceState


@dataclass(frozen=True)
class Probe:
    ok: bool
    error: str = ""
    metrics: dict | None = None


def probe(endpoint_url: str, client: httpx.Client) -> Probe:
    """GET /health then /metrics, each bounded by the probe timeout."""
    try:
        health = client.get(endpoint_url + "/health")
    except httpx.TimeoutException:
        return Probe(False, "probe timed out (engine hung?)")
    except httpx.HTTPError as exc:
        return Probe(False, f"probe failed: {type(exc).__name__}: {exc}"[:500])
    if health.status_code != 200:
        return Probe(False, f"/health answered {health.status_code}")
    return Probe(True, metrics=scrape(endpoint_url, client))


def scrape(endpoint_url: str, client: httpx.Client) -> dict | None:
    """The engine's metrics, or None (the last ones stay) when they do not come in time or do not parse.

    Only /health decides whether an engine is healthy: a busy engine renders its metrics slowly, and a
    slow scrape counted as a failed probe took healthy engines out of service exactly under load."""
    try:
        scraped = client.get(endpoint_url + "/metrics")
        return metrics.summarize(scraped.text) if scraped.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as exc:
        logger.info("metrics of %s not scraped: %s: %s", endpoint_url, type(exc).__name__, exc)
        return None


def new_client() -> httpx.Client:
    timeout = settings.SWITCHYARD_FLEET_PROBE_TIMEOUT_SECONDS
    return httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 1.0)))


@dataclass(frozen=True)
class Observation:
    alive: bool
    probe: Probe | None = None


def check_all() -> dict:
    """Probe every instance whose engine should be running (skipped while another pass runs)."""
    with leases.held("fleet.health_check", ttl=settings.SWITCHYARD_FLEET_HEALTH_PASS_SECONDS) as ours:
        if not ours:
            return {"skipped": 1}
        instances = [i for i in Instance.objects.filter(state__in=RUNNING_STATES).select_related("deployment")
                     if get_backend(i.deployment.runtime_backend).probed_by_fleet]
        counts: dict[str, int] = {}
        signals: dict[int, dict] = {}
        with new_client() as client, ThreadPoolExecutor(settings.SWITCHYARD_FLEET_PROBE_CONCURRENCY) as pool:
            seen = pool.map(lambda instance: observe(instance, client), instances)
            for instance, observation in zip(instances, seen):
                outcome = act(instance, observation)
                counts[outcome] = counts.get(outcome, 0) + 1
                if observation.probe is not None and observation.probe.metrics:
                    signals[instance.pk] = _signal(observation.probe.metrics)
        if signals:
            publish_signals(signals)  # the gateways' routing sees each engine's own queue
        return counts


def _signal(metrics: dict) -> dict:
    return {"waiting": metrics.get("num_requests_waiting", 0), "running": metrics.get("num_requests_running", 0),
            "kv": metrics.get("kv_cache_usage_perc")}


def check_instance(instance: Instance, client: httpx.Client) -> str:
    """Probe one instance and act on it; returns what happened, for the task result."""
    return act(instance, observe(instance, client))


def observe(instance: Instance, client: httpx.Client) -> Observation:
    """What the engine looks like now; touches no database (it runs in the probe threads)."""
    if not get_backend(instance.deployment.runtime_backend).is_alive(instance):
        return Observation(alive=False)
    return Observation(alive=True, probe=probe(instance.endpoint_url, client))


def act(instance: Instance, observation: Observation) -> str:
    """Record one observation and move the instance on accordingly."""
    backend = get_backend(instance.deployment.runtime_backend)
    result = observation.probe
    if not observation.alive or result is None:  # only a dead engine goes unprobed
        if instance.state == S.DRAINING:
            return "draining"  # the drain task stops it and records the stop
        fail_instance(instance.pk, "engine process exited")
        return "died"
    record_probe(instance.pk, ok=result.ok, error=result.error, metrics=result.metrics)
    if instance.state == S.STARTING:
        return _check_starting(instance, backend, result)
    if not result.ok and instance.state == S.READY:
        return _count_failure(instance, result)
    return "ok" if result.ok else "unhealthy"


def _check_starting(instance: Instance, backend, result: Probe) -> str:
    if result.ok and not backend.serves_endpoint(instance):
        # Someone else (another install's engine, another program) took the port before ours bound it:
        # routing there would send this install's tenants to a stranger.
        fail_instance(instance.pk, f"port {instance.port} answers, but not from this instance's engine")
        return "port-taken"
    if result.ok:
        if try_transition(instance.pk, S.READY) is not None:
            _warm_up_soon(instance.pk)
        return "ready"
    deadline = backend.start_deadline_seconds
    if instance.starting_at is not None and timezone.now() - instance.starting_at > timedelta(seconds=deadline):
        fail_instance(instance.pk, f"not healthy within the {deadline:.0f} s start-up deadline")
        return "start-timeout"
    return "starting"


def _warm_up_soon(instance_id: int) -> None:
    """The engine's first request is its slowest: the fleet sends it, not a user (fleet/warmup.py)."""
    from fleet.tasks import warm_up

    transaction.on_commit(lambda: warm_up.delay(instance_id))


def _count_failure(instance: Instance, result: Probe) -> str:
    failures = instance.consecutive_health_failures + 1  # `instance` was read before this probe
    if failures >= settings.SWITCHYARD_FLEET_HEALTH_FAILURES:
        fail_instance(instance.pk, f"{failures} consecutive failed health probes: {result.error}"[:500])
        return "failed"
    return "unhealthy"
