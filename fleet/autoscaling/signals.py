"""What the autoscaler reads: one demand sample per deployment and pass, from the engines and the gateway.

Engines: the health pass's latest metrics of each ready serving instance (waiting and running
requests, KV-cache usage). Gateway: the requests the gateways hold in flight at its engines now, and
of those the streamed ones without a first token yet (their demand signal in Redis,
controlplane/demand_signal.py), and the p95 TTFT and the request
count of the deployment's instances since the previous sample, from the usage records (written
within a second or two).
"""
from datetime import timedelta

from django.db.models import Count
from django.utils import timezone

from controlplane import demand_signal
from fleet.autoscaling.policy import Sample
from fleet.models import DemandSample, Deployment, InstanceRole
from fleet.states import InstanceState

S = InstanceState
KEEP = timedelta(hours=24)  # samples kept for the chart; decisions read far less


def measure(deployment: Deployment, since) -> DemandSample:
    """A sample of `deployment` now (not saved)."""
    live = list(deployment.instances.filter(state__in=(S.PENDING, S.STARTING, S.READY)))
    serving = [i for i in live if i.role == InstanceRole.SERVING]
    ready = [i.metrics or {} for i in serving if i.state == S.READY]
    kv = [m["kv_cache_usage_perc"] for m in ready if m.get("kv_cache_usage_perc") is not None]
    ttft, requests = _gateway_figures([i.pk for i in live], since)
    held, gateway_waiting = demand_signal.read(deployment.pk) or (None, None)
    return DemandSample(deployment=deployment, at=timezone.now(), serving=len(serving),
                        warm=len(live) - len(serving),
                        waiting=sum(m.get("num_requests_waiting", 0) for m in ready),
                        running=sum(m.get("num_requests_running", 0) for m in ready),
                        kv_cache_usage=sum(kv) / len(kv) if kv else None, ttft_p95_ms=ttft, requests=requests,
                        held=held, gateway_waiting=gateway_waiting)


def _gateway_figures(instance_ids: list[int], since) -> tuple[float | None, int]:
    from usage.models import UsageEvent

    events = UsageEvent.objects.filter(instance_id__in=instance_ids, occurred_at__gt=since)
    requests = events.aggregate(n=Count("pk"))["n"]
    ttfts = sorted(t for t in events.exclude(ttft_ms__isnull=True).values_list("ttft_ms", flat=True)[:10_000]
                   if t is not None)
    return (ttfts[min(len(ttfts) - 1, int(0.95 * len(ttfts)))] if ttfts else None), requests


def recent(deployment: Deployment, seconds: float) -> list[Sample]:
    """The policy's view of the deployment's samples of the last `seconds`."""
    since = timezone.now() - timedelta(seconds=seconds)
    return [as_policy_sample(s) for s in deployment.demand_samples.filter(at__gte=since).order_by("at")]


def as_policy_sample(sample: DemandSample) -> Sample:
    return Sample(at=sample.at.timestamp(), serving=sample.serving, waiting=sample.waiting, running=sample.running,
                  kv_cache_usage=sample.kv_cache_usage, ttft_p95_ms=sample.ttft_p95_ms, requests=sample.requests,
                  held=sample.held, gateway_waiting=sample.gateway_waiting)


def prune() -> int:
    """Drop samples older than a day."""
    return DemandSample.objects.filter(at__lt=timezone.now() - KEEP).delete()[0]
