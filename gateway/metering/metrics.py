"""Prometheus series for the gateway, in a registry of its own (one per app, no globals).

With `--workers N` every worker counts into files of prometheus_client's multiprocess mode, in a
directory private to that gateway start (`PROMETHEUS_MULTIPROC_DIR`, made by the supervisor,
gateway/__main__.py), and a scrape — whichever worker answers it — merges every worker's files:
counters and histograms are the sums over all workers, including workers that exited (a restarted
worker's requests stay counted); gauges follow each one's `multiprocess_mode` (docs/gateway.md,
"Metrics"). A single gateway process keeps its values in memory.
"""
from __future__ import annotations

import os
import time
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import values as prometheus_values
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.values import MutexValue

MAX_CACHED_SERIES = 10_000  # cached children per label set; cleared (not the series) past this
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


# The usage writer's series beyond the buffer (docs/usage-and-cost.md, "When the database is away"):
# (attribute, kind, name, help, labels). The spool is the install's, seen alike by every worker: its
# gauges take the largest live worker's figure, not the sum.
USAGE_WRITER_SERIES = (
    ("usage_spooled", Counter, "switchyard_gateway_usage_spooled",
     "Usage events written to the local spool while the database was away.", ()),
    ("usage_replayed", Counter, "switchyard_gateway_usage_replayed",
     "Spooled usage events written to the database (by this process).", ()),
    ("usage_spool_bytes", Gauge, "switchyard_gateway_usage_spool_bytes",
     "Bytes in the install's usage spool (every process's segments).", ()),
    ("usage_spool_segments", Gauge, "switchyard_gateway_usage_spool_segments",
     "Segment files in the install's usage spool.", ()),
    ("usage_database_away", Gauge, "switchyard_gateway_usage_database_away",
     "1 while a gateway process's usage writes find the database unavailable.", ()),
    ("usage_set_aside", Counter, "switchyard_gateway_usage_set_aside",
     "Usage events the database refused even alone, kept in the dead letter.", ()),
    ("usage_lost", Counter, "switchyard_gateway_usage_lost",
     "Usage events that could be neither stored nor kept (spool full or failing, dead letter full).", ("reason",)),
)


class GatewayMetrics:
    """Every series the gateway exports; `render()` is the /metrics body."""

    def __init__(self):
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("switchyard_gateway_requests", "Requests answered, by outcome.",
                                ["status", "model", "tenant", "endpoint"], registry=registry)
        self.ttft = Histogram("switchyard_gateway_ttft_seconds", "Time to the engine's first byte.",
                              ["model"], buckets=LATENCY_BUCKETS, registry=registry)
        self.latency = Histogram("switchyard_gateway_request_seconds", "Whole request latency.",
                                 ["model", "endpoint"], buckets=LATENCY_BUCKETS, registry=registry)
        self.tokens = Counter("switchyard_gateway_tokens", "Tokens metered, by kind.",
                              ["model", "tenant", "kind"], registry=registry)
        self.limit_rejections = Counter("switchyard_gateway_limit_rejections", "Requests refused by a limit.",
                                        ["tenant", "reason"], registry=registry)
        self.upstream_errors = Counter("switchyard_gateway_upstream_errors", "Failed engine calls.",
                                       ["instance", "kind"], registry=registry)
        self.retries = Counter("switchyard_gateway_retries", "Requests retried on another instance.",
                               ["model"], registry=registry)
        self.prefix_warmups = Counter("switchyard_gateway_prefix_warmups",
                                      "Prompt heads sent to engines that joined a pool, by outcome (ok, failed).",
                                      ["outcome"], registry=registry)
        self.outstanding = Gauge("switchyard_gateway_outstanding_requests", "Requests in flight per engine.",
                                 ["instance"], registry=registry, multiprocess_mode="livesum")
        self.ejections = Counter("switchyard_gateway_ejections", "Engines taken out of rotation.",
                                 ["instance"], registry=registry)
        self.snapshot_version = Gauge("switchyard_gateway_snapshot_loads", "Snapshots loaded since start.",
                                      registry=registry, multiprocess_mode="livemax")
        self.usage_pending = Gauge("switchyard_gateway_usage_buffered", "Usage events waiting to be written.",
                                   registry=registry, multiprocess_mode="livesum")
        for attribute, kind, name, text, labels in USAGE_WRITER_SERIES:
            mode = {"multiprocess_mode": "livemax"} if kind is Gauge else {}
            setattr(self, attribute, kind(name, text, list(labels), registry=registry, **mode))
        self.queue_depth = Gauge("switchyard_gateway_queue_depth", "Requests waiting for a saturated pool.",
                                 ["tenant"], registry=registry, multiprocess_mode="livesum")
        self.queue_wait = Histogram("switchyard_gateway_queue_wait_seconds", "Time spent waiting in a pool's queue.",
                                    buckets=LATENCY_BUCKETS, registry=registry)
        self.queue_rejections = Counter("switchyard_gateway_queue_rejections", "Requests refused by the fair queue.",
                                        ["tenant", "reason"], registry=registry)
        self.fair_queue_fallbacks = Counter(
            "switchyard_gateway_fair_queue_local_fallbacks",
            "Times a pool's shared fair queue fell back to per-process fairness (Redis unavailable).",
            registry=registry)
        self.session_placements = Counter(
            "switchyard_gateway_session_placements",
            "Requests with a session header: kept on the session's engine, placed (new session) or moved (its "
            "engine failed); spilled also counts those served elsewhere once (their engine over the load bound).",
            ["result"], registry=registry)
        self.fallbacks = Counter("switchyard_gateway_fallbacks", "Requests sent to a fallback model.",
                                 ["model", "reason"], registry=registry)
        self.dedup = Counter("switchyard_gateway_dedup_lookups", "De-duplication cache lookups.", ["result"],
                             registry=registry)
        self.superseded = Counter("switchyard_gateway_supersession", "Interactive requests superseded by their "
                                  "session's newer one (cancelled), or not checked (redis_unavailable).",
                                  ["result"], registry=registry)
        self.affinity_home = Counter("switchyard_gateway_prefix_affinity_home",
                                     "Prefix-affinity requests placed on their key's home engine.", registry=registry)
        self._children: dict[tuple, Any] = {}  # (metric, label values) -> child, see `child`
        self._outstanding_reads: dict[int, Callable[[], float]] = {}  # instance id -> its balancer count
        self._done: dict[tuple, DoneSeries] = {}  # observe_done's key -> its children, see `done_series`
        self.affinity_spill = Counter("switchyard_gateway_prefix_affinity_spill",
                                      "Prefix-affinity requests spilled past their key's home engine.",
                                      registry=registry)
        # Per-request updates of unlabelled series, without prometheus_client's per-call checks.
        self.observe_queue_wait = HistogramObserver(self.queue_wait).observe
        self._count_home, self._count_spill = _count_of(self.affinity_home), _count_of(self.affinity_spill)
        self.multiprocess_dir = multiprocess_dir()
        self._exposed = registry
        if self.multiprocess_dir:  # every worker's files, merged at each scrape
            self._exposed = CollectorRegistry()
            MultiProcessCollector(self._exposed, self.multiprocess_dir)

    def observe_done(self, record) -> None:
        """Count one finished request from its usage record."""
        # Only names found in the snapshot become labels: clients cannot mint new series.
        key = (record.status_code, record.model_name if record.model_known else "", record.tenant_id, record.endpoint)
        series = self._done.get(key) or self.done_series(*key)
        series.count_request(1)
        series.latency.observe(_seconds_since(record.started))
        if record.ttft_ms is not None:
            (series.ttft or self._ttft_of(series)).observe(record.ttft_ms / 1000)
        # Token counts are never negative (RequestRecord.take_usage).
        for kind, count in (("prompt", record.prompt_tokens), ("completion", record.completion_tokens),
                            ("cached", record.cached_tokens)):
            if count:
                (series.count_tokens.get(kind) or self._tokens_of(series, kind))(count)

    def done_series(self, status_code: int, model: str, tenant_id: int | None, endpoint: str) -> DoneSeries:
        """The series one finished request counts in, looked up once per label set."""
        tenant = str(tenant_id or "")
        series = DoneSeries(model, tenant,
                            _count_of(self.child(self.requests, str(status_code), model, tenant, endpoint)),
                            HistogramObserver(self.child(self.latency, model, endpoint)))
        if len(self._done) >= MAX_CACHED_SERIES:
            self._done.clear()  # forgets the cache only; the series stay
        self._done[(status_code, model, tenant_id, endpoint)] = series
        return series

    # The ttft and token series appear on first use, as with `.labels()` at the moment of counting.
    def _ttft_of(self, series: DoneSeries) -> HistogramObserver:
        series.ttft = HistogramObserver(self.child(self.ttft, series.model))
        return series.ttft

    def _tokens_of(self, series: DoneSeries, kind: str) -> Callable[[float], None]:
        count = series.count_tokens[kind] = _count_of(self.child(self.tokens, series.model, series.tenant, kind))
        return count

    def child(self, metric, *labels: str):
        """`metric.labels(*labels)`, looked up once (`.labels()` validates and locks on every call)."""
        key = (metric, labels)
        found = self._children.get(key)
        if found is None:
            if len(self._children) >= MAX_CACHED_SERIES:
                self._children.clear()  # forgets the cache only; the series stay
            found = self._children[key] = metric.labels(*labels)
        return found

    def track_outstanding(self, instance_id: int, read: Callable[[], float]) -> None:
        """One engine's outstanding-requests gauge takes `read()` at each `refresh_gauges` (nothing per request)."""
        self._outstanding_reads[instance_id] = read
        self.child(self.outstanding, str(instance_id))

    def forget_outstanding(self, instance_id: int) -> None:
        """Drop an engine's gauge (it left the snapshot)."""
        self._outstanding_reads.pop(instance_id, None)
        child = self._children.pop((self.outstanding, (str(instance_id),)), None)
        if child is not None and self.multiprocess_dir:
            child.set(0)  # a multiprocess file keeps the series: it reads 0 until the workers restart
        try:
            self.outstanding.remove(str(instance_id))
        except KeyError:
            pass

    def refresh_gauges(self) -> None:
        """Set the gauges read from live state (before a scrape; every second in each `--workers` worker)."""
        for instance_id, read in list(self._outstanding_reads.items()):
            self.child(self.outstanding, str(instance_id)).set(read())

    def observe_placement(self, home: bool) -> None:
        """The prefix-affinity policy's report: home engine or spilled."""
        (self._count_home if home else self._count_spill)(1)

    def observe_session(self, result: str) -> None:
        """Session affinity's report: the session stayed on its engine, was placed, or moved."""
        self.child(self.session_placements, result).inc()

    def render(self) -> bytes:
        """The exposition: this process's series, or with `--workers` every worker's, merged."""
        self.refresh_gauges()
        return generate_latest(self._exposed)


def multiprocess_dir() -> str | None:
    """The directory of multiprocess mode's files when prometheus_client runs in it, else None.

    prometheus_client chooses the mode once, when it is first imported, from PROMETHEUS_MULTIPROC_DIR:
    only the `--workers` supervisor sets it, for its workers (gateway/__main__.py)."""
    if not getattr(prometheus_values.ValueClass, "_multiprocess", False):
        return None
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR")


# observe_done counts in the children's values directly, skipping prometheus_client's per-call
# checks (`inc` and `observe` re-check that the child is observable and the amount not negative;
# the amounts here never are). The values are added to without their lock: every update and every
# scrape of these series runs on the gateway's event-loop thread, never in its database threads.
# This uses attributes of prometheus_client 0.26 (pinned in requirements.txt);
# tests/gateway/test_metrics_done.py compares the exposition with the public API's.

def _adder(value) -> Callable[[float], None]:
    """Add to a prometheus_client value without taking its lock (see above)."""
    if type(value) is MutexValue:
        def add(amount: float, value=value) -> None:
            value._value += amount
        return add
    if getattr(value, "_multiprocess", False):  # `--workers`: the new total also goes to the worker's file
        return _file_adder(value)
    return value.inc


def _file_adder(value) -> Callable[[float], None]:
    """Multiprocess mode's `inc` without its lock and its fork check: a worker is started by exec, never
    forked once its metrics exist. Writing through the file object (not its memory map, which grows)
    keeps a new series' key safe."""
    write, key = value._file.write_value, value._key

    def add_and_write(amount: float, value=value) -> None:
        value._value += amount
        write(key, value._value, 0.0)
    return add_and_write


def _count_of(counter_child) -> Callable[[float], None]:
    """A labelled counter's increment, for amounts known to be non-negative."""
    return _adder(counter_child._value)


class HistogramObserver:
    """A labelled histogram's `observe`, for amounts that are never NaN (durations)."""

    __slots__ = ("_add_to_sum", "_upper_bounds", "_count_in_bucket")

    def __init__(self, histogram_child):
        self._add_to_sum = _adder(histogram_child._sum)
        self._upper_bounds = histogram_child._upper_bounds  # ascending, the last +Inf
        self._count_in_bucket = [_adder(bucket) for bucket in histogram_child._buckets]

    def observe(self, amount: float) -> None:
        self._add_to_sum(amount)
        # The first bucket whose bound is >= amount, as prometheus_client's scan finds it.
        self._count_in_bucket[bisect_left(self._upper_bounds, amount)](1)


@dataclass(slots=True)
class DoneSeries:
    """What `observe_done` counts in for one (status, model, tenant, endpoint)."""

    model: str
    tenant: str
    count_request: Callable[[float], None]
    latency: HistogramObserver
    ttft: HistogramObserver | None = None
    count_tokens: dict[str, Callable[[float], None]] = field(default_factory=dict)  # by kind


def _seconds_since(started: float) -> float:
    return max(0.0, time.monotonic() - started)
