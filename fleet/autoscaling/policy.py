"""The scaling policy as a pure function: (rules, recent signals, current size, clock) → a decision.

No database, no clock of its own, no randomness: the autoscale task gathers samples and calls
`decide`, and tests drive it with any sequence they like. Rules follow production practice:
- scale up when, for a whole window, waiting requests per serving instance stay above a
  threshold, or KV-cache usage stays above its threshold, or the gateway's p95 TTFT stays above
  the SLO; by a step proportional to the excess (the largest any rule asks for), at most `max_step`,
  after the up cooldown;
- a surge (Knative's "panic mode"): waiting per instance at SURGE_FACTOR × the threshold, at every
  look over a tenth of the up window (and at two looks at least), scales up at once, by the same
  proportional step — a step in demand is not made to wait the whole window;
- waiting requests are the engines' own count, or — when larger — the gateways' count of streamed
  requests sent to the deployment's engines and still without a first token (`Sample.gateway_waiting`:
  the gateways know at once, the engines' metrics arrive with the next health probe);
- scale down by one after an idle window (the window's mean load, spread over one instance fewer,
  under the low-water mark per instance), never below min, never while a rollout or drain is in
  progress, after the down cooldown and not within the down cooldown of a scale-up (hysteresis: the
  low-water mark sits well under the up threshold, an up window must hold throughout, and a step down
  must land under the mark, so a signal oscillating around either threshold moves nothing);
- with min 0, the last instance goes only after a longer idle period with no request at all;
  a deployment at zero wakes on the first request (the gateway asks: `wake`);
- schedule windows (schedule.py) raise the floor: from `schedule_lead_seconds` before a window opens
  until it closes the deployment serves at least the window's `min_serving` (within max), at once,
  whatever the cooldowns; the reactive rules add above it, scale-down and scale-to-zero stop at it.
"""
import math
from dataclasses import asdict, dataclass

from fleet.autoscaling.schedule import DEFAULT_LEAD_SECONDS, Window, floor_at

# The TTFT rule acts only on a window of at least this many requests: the p95 of a handful is the slowest one,
# and one developer's burst of uncached prompts on a quiet deployment is not a reason to add an engine.
TTFT_MIN_REQUESTS = 20
# The surge rule, after Knative's autoscaler: its panic threshold is 200 % of the target and its panic window
# 10 % of the stable window (docs/autoscaling.md).
SURGE_FACTOR = 2.0
SURGE_WINDOW_SHARE = 0.1


@dataclass(frozen=True)
class Rules:
    min_replicas: int
    max_replicas: int
    queue_per_instance: float = 8.0  # waiting requests per serving instance that mean "too few"
    kv_cache_usage: float = 0.90
    ttft_p95_slo_ms: float | None = None
    up_window_seconds: float = 20.0
    low_water_per_instance: float = 1.0  # running + waiting per serving instance that means "idle"
    idle_window_seconds: float = 300.0
    zero_after_idle_seconds: float = 900.0
    cooldown_up_seconds: float = 60.0
    cooldown_down_seconds: float = 300.0
    max_step: int = 2
    sample_interval_seconds: float = 5.0  # how often samples come: a window is covered within one interval
    schedule: tuple[Window, ...] = ()
    schedule_lead_seconds: float = DEFAULT_LEAD_SECONDS


@dataclass(frozen=True)
class Sample:
    """One look at a deployment's serving engines (sums over them) and its gateway traffic."""

    at: float
    serving: int
    waiting: float = 0.0
    running: float = 0.0
    kv_cache_usage: float | None = None  # mean over serving instances, 0..1
    ttft_p95_ms: float | None = None
    requests: int = 0  # requests the gateway received for it since the previous sample
    held: float | None = None  # requests the gateways hold in flight at its engines now (None: not known)
    gateway_waiting: float | None = None  # of those, streamed ones without a first token yet (None: not known)


@dataclass(frozen=True)
class Situation:
    now: float
    serving: int  # the serving size the deployment is at now (its desired serving replicas)
    last_scale_up_at: float | None = None
    last_scale_down_at: float | None = None
    busy: bool = False  # a rollout or a drain in progress: never scale down then
    wake_requested: bool = False


@dataclass(frozen=True)
class Decision:
    action: str  # "hold", "up" or "down"
    from_serving: int
    to_serving: int
    rule: str
    signals: dict
    reason: str

    @property
    def changes(self) -> bool:
        return self.to_serving != self.from_serving


def decide(rules: Rules, samples: list[Sample], situation: Situation) -> Decision:
    """What to do now; `hold` when nothing should change."""
    current = situation.serving
    signals = _signals(samples)
    if current < rules.min_replicas:
        return _move(current, rules.min_replicas, "min", signals, f"below the minimum of {rules.min_replicas}")
    if current > rules.max_replicas:
        return _move(current, rules.max_replicas, "max", signals, f"above the maximum of {rules.max_replicas}")
    floor, why = scheduled_floor(rules, situation)
    if current < floor:
        return _move(current, floor, "schedule", signals, why)
    if current == 0:
        return _wake(rules, samples, situation, signals)
    return _scale_up(rules, samples, situation, signals) or \
        _scale_down(rules, samples, situation, signals, max(rules.min_replicas, floor)) or \
        _hold(current, signals, f"within its rules; {why}" if floor else "within its rules")


def scheduled_floor(rules: Rules, situation: Situation) -> tuple[int, str]:
    """The serving size a schedule window asks for now (0: none), capped at max, and why."""
    found = floor_at(rules.schedule, situation.now, rules.schedule_lead_seconds)
    if found is None:
        return 0, ""
    why = found.reason(rules.schedule_lead_seconds, situation.now)
    if found.min_serving > rules.max_replicas:
        why += f" (capped at the maximum of {rules.max_replicas})"
    return min(found.min_serving, rules.max_replicas), why


def _wake(rules: Rules, samples: list[Sample], situation: Situation, signals: dict) -> Decision:
    demand = situation.wake_requested or any(s.waiting > 0 or s.requests > 0 for s in _recent(samples, situation,
                                                                                                rules.up_window_seconds))
    if demand and rules.max_replicas > 0:
        return _move(0, max(1, rules.min_replicas), "wake", signals, "a request arrived for a deployment at zero")
    return _hold(0, signals, "asleep (scaled to zero)")


def _scale_up(rules: Rules, samples: list[Sample], situation: Situation, signals: dict) -> Decision | None:
    current = situation.serving
    if current >= rules.max_replicas or _cooling(situation.last_scale_up_at, rules.cooldown_up_seconds, situation):
        return None
    asks = [(0, "", "")]
    window = _window(samples, situation, rules.up_window_seconds, rules.sample_interval_seconds)
    if window:
        asks.append(_wanted_for_load(rules, window, current))
    surge = surge_span(rules, samples, situation)
    if surge:
        asks.append(_surge_ask(rules, surge, current))
    wanted, rule, reason = max(asks, key=lambda ask: ask[0])  # on a tie the window's rules name the decision
    if wanted <= current:
        return None
    target = min(rules.max_replicas, current + min(rules.max_step, wanted - current))
    return _move(current, target, rule, signals, reason)


def waiting(sample: Sample) -> float:
    """Requests waiting for an engine: the engines' count, or the gateways' when larger (theirs is current,
    the engines' a health probe old)."""
    return max(sample.waiting, sample.gateway_waiting or 0.0)


def surge_span(rules: Rules, samples: list[Sample], situation: Situation) -> list[Sample]:
    """The latest looks, back to the first of an unbroken run with waiting per instance at the surge level;
    [] unless that run holds at least two looks spanning a tenth of the up window, the newest of them fresh."""
    level = SURGE_FACTOR * rules.queue_per_instance
    recent = _recent(samples, situation, rules.up_window_seconds)
    if not recent or situation.now - recent[-1].at > rules.sample_interval_seconds:
        return []
    span: list[Sample] = []
    for sample in reversed(recent):
        if waiting(sample) / max(sample.serving, 1) < level or \
                (span and span[-1].at - sample.at > 2 * rules.sample_interval_seconds):
            break
        span.append(sample)
    if len(span) < 2 or span[0].at - span[-1].at < SURGE_WINDOW_SHARE * rules.up_window_seconds:
        return []
    return span[::-1]


def _surge_ask(rules: Rules, span: list[Sample], current: int) -> tuple[int, str, str]:
    queue = min(waiting(s) / max(s.serving, 1) for s in span)
    return (math.ceil(current * queue / rules.queue_per_instance), "surge",
            f"{queue:.1f} waiting per instance ≥ {SURGE_FACTOR:g} × {rules.queue_per_instance:g} "
            f"for {span[-1].at - span[0].at:.1f} s")


def _wanted_for_load(rules: Rules, window: list[Sample], current: int) -> tuple[int, str, str]:
    """The largest serving size a rule asks for at the window's least-loaded moment (0 when no rule fires).

    Queue and TTFT ask in proportion to their excess (`ceil(serving × value ÷ threshold)`, as Kubernetes'
    HPA does), so a step in demand is met in one move rather than one instance per cooldown; KV usage,
    bounded by 100 %, asks for one more. On a tie the earlier rule names the decision."""
    asks = [(0, "", "")]
    queue = min(waiting(s) / max(s.serving, 1) for s in window)
    if queue > rules.queue_per_instance:
        asks.append((math.ceil(current * queue / rules.queue_per_instance), "queue",
                     f"{queue:.1f} waiting per instance > {rules.queue_per_instance:g} "
                     f"for {rules.up_window_seconds:g} s"))
    kv = [s.kv_cache_usage for s in window if s.kv_cache_usage is not None]
    if len(kv) == len(window) and min(kv) > rules.kv_cache_usage:
        asks.append((current + 1, "kv_cache", f"KV cache {min(kv):.0%} used > {rules.kv_cache_usage:.0%}"))
    ttft = [s.ttft_p95_ms for s in window if s.ttft_p95_ms is not None]
    enough = sum(s.requests for s in window) >= TTFT_MIN_REQUESTS
    if rules.ttft_p95_slo_ms is not None and enough and len(ttft) == len(window) and min(ttft) > rules.ttft_p95_slo_ms:
        asks.append((max(current + 1, math.ceil(current * min(ttft) / rules.ttft_p95_slo_ms)), "ttft",
                     f"p95 TTFT {min(ttft):.0f} ms > SLO {rules.ttft_p95_slo_ms:g} ms"))
    return max(asks, key=lambda ask: ask[0])


def _scale_down(rules: Rules, samples: list[Sample], situation: Situation, signals: dict,
                floor: int) -> Decision | None:
    current = situation.serving
    if situation.busy or current <= floor:
        return None
    to_zero = current == 1
    seconds = max(rules.idle_window_seconds, rules.zero_after_idle_seconds) if to_zero else rules.idle_window_seconds
    # Back to zero only a whole idle period after the last wake or scale-up: the requests a wake holds at
    # the gateway show in no sample until served, so the quiet samples from before the wake (and of a
    # cold start longer than the down cooldown) must not put a deployment that just woke back to sleep.
    since_up = seconds if to_zero else rules.cooldown_down_seconds
    if _cooling(situation.last_scale_down_at, rules.cooldown_down_seconds, situation) or \
            _cooling(situation.last_scale_up_at, since_up, situation):
        return None
    window = _window(samples, situation, seconds, rules.sample_interval_seconds)
    if not window:
        return None
    if to_zero:
        if any(s.requests or s.waiting or s.running or s.held for s in window):
            return None
        return _move(current, 0, "scale-to-zero", signals, f"no request for {seconds:g} s")
    # Idle is judged on the window's mean load, spread over the instances that would remain: a burst of a few
    # requests now and then (one developer's) does not keep a quiet deployment large, as one look over the mark
    # would (Kubernetes' HPA and Knative average over their windows too), and the step down lands under the mark.
    mean = sum(_load(s) for s in window) / len(window)
    if mean / (current - 1) >= rules.low_water_per_instance:
        return None
    return _move(current, current - 1, "idle", signals,
                 f"mean load {mean:.1f} over {seconds:g} s is under {rules.low_water_per_instance:g} per instance "
                 f"on {current - 1}")


def _load(sample: Sample) -> float:
    """Running + waiting on the deployment's engines (the gateways' in-flight count when it is larger)."""
    return max(sample.running + sample.waiting, sample.held or 0.0)


def _window(samples: list[Sample], situation: Situation, seconds: float, interval: float) -> list[Sample]:
    """The samples of the last `seconds`, or [] when they do not reach back that far (no gaps allowed)."""
    recent = _recent(samples, situation, seconds)
    if not recent or recent[0].at > situation.now - seconds + interval:
        return []
    steps = [b.at - a.at for a, b in zip(recent, recent[1:])] + [situation.now - recent[-1].at]
    return recent if max(steps) <= 2 * interval else []


def nudge_level(rules: Rules, situation: Situation) -> float | None:
    """How many requests waiting at the deployment's engines should make a gateway ask for a decision now
    (the surge level); None while no scale-up can follow anyway."""
    if situation.serving >= rules.max_replicas or situation.serving == 0 or \
            _cooling(situation.last_scale_up_at, rules.cooldown_up_seconds, situation):
        return None
    return SURGE_FACTOR * rules.queue_per_instance * situation.serving


def _recent(samples: list[Sample], situation: Situation, seconds: float) -> list[Sample]:
    return sorted((s for s in samples if situation.now - seconds <= s.at <= situation.now), key=lambda s: s.at)


def _cooling(last: float | None, seconds: float, situation: Situation) -> bool:
    return last is not None and situation.now - last < seconds


def _signals(samples: list[Sample]) -> dict:
    return asdict(max(samples, key=lambda s: s.at)) if samples else {}


def _move(current: int, target: int, rule: str, signals: dict, reason: str) -> Decision:
    return Decision("up" if target > current else "down", current, target, rule, signals, reason)


def _hold(current: int, signals: dict, reason: str) -> Decision:
    return Decision("hold", current, current, "", signals, reason)
