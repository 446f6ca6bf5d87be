"""Seeded coding-assistant workloads: steady bursty traffic for the routing benchmark (`bench/routing.py`)
and the "stand-up spike" for the autoscaling benchmark (`bench/autoscale.py`).

Developers work in repositories. Every prompt of a repository starts with the same long text
(the repository's system prompt, then the file headers every file shares: licence, imports,
conventions — about 2.5 kB together), then one file's content, then a short per-request suffix
(what was just typed, or the question). Two shapes: editor completions (`/v1/completions`,
max_tokens 16) and chat about the file (`/v1/chat/completions`, system = the repository's prompt,
max_tokens 64). Arrivals are bursty: bursts arrive as a Poisson process; each burst is one
developer typing in one file, a few requests a fraction of a second apart.

The stand-up spike is the same requests with another arrival curve: a quiet team (the stand-up),
then everyone back at their desk at once — a step to several times the rate, held, then fading
back to quiet.

    python -m bench workload      # prints a summary of both workloads
"""
from __future__ import annotations

import os
import random
import statistics
from dataclasses import dataclass

WORDS = ("request", "tenant", "cache", "block", "engine", "token", "policy", "limit", "route", "stream",
         "budget", "usage", "deploy", "model", "batch", "prefix", "client", "config", "metric", "state",
         "handler", "buffer", "record", "window", "event", "result", "session", "worker", "queue", "key")


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One request of the workload: when to send it (seconds from the start) and what."""

    at: float
    endpoint: str  # "/v1/completions" or "/v1/chat/completions"
    body: dict
    developer: int
    repo: int
    shared_chars: int  # characters every prompt of this repository (and shape) starts with


@dataclass(frozen=True)
class WorkloadSpec:
    seed: int = 7
    developers: int = 60
    repos: int = 12
    files_per_repo: int = 10
    files_per_developer: int = 3
    seconds: float = 30.0
    rate: float = 30.0  # requests per second, on average
    mean_burst: float = 5.0  # requests per burst
    burst_gap: float = 0.25  # mean seconds between the requests of a burst
    chat_share: float = 0.15

    @classmethod
    def from_env(cls) -> "WorkloadSpec":
        """BENCH_ROUTING_SECONDS / _RATE / _SEED override the defaults."""
        return cls(seconds=float(os.environ.get("BENCH_ROUTING_SECONDS", cls.seconds)),
                   rate=float(os.environ.get("BENCH_ROUTING_RATE", cls.rate)),
                   seed=int(os.environ.get("BENCH_ROUTING_SEED", cls.seed)))


@dataclass(frozen=True)
class StandupSpec:
    """The stand-up spike: `quiet_rate` req/s, a step to `spike_rate` at `step_at`, held, faded, quiet again."""

    seed: int = 11
    developers: int = 60
    repos: int = 12
    files_per_repo: int = 10
    files_per_developer: int = 3
    quiet_rate: float = 1.0
    spike_rate: float = 8.0
    step_at: float = 40.0
    hold_seconds: float = 60.0
    fade_seconds: float = 30.0
    seconds: float = 300.0
    mean_burst: float = 3.0
    burst_gap: float = 0.25
    chat_share: float = 0.15

    @classmethod
    def from_env(cls) -> "StandupSpec":
        """BENCH_AUTOSCALE_QUIET_RATE / _SPIKE_RATE / _SEED override the defaults."""
        return cls(quiet_rate=float(os.environ.get("BENCH_AUTOSCALE_QUIET_RATE", cls.quiet_rate)),
                   spike_rate=float(os.environ.get("BENCH_AUTOSCALE_SPIKE_RATE", cls.spike_rate)),
                   seed=int(os.environ.get("BENCH_AUTOSCALE_SEED", cls.seed)))

    @property
    def spike_ends(self) -> float:
        return self.step_at + self.hold_seconds + self.fade_seconds

    def rate_at(self, at: float) -> float:
        if at < self.step_at or at >= self.spike_ends:
            return self.quiet_rate
        faded = max(0.0, at - self.step_at - self.hold_seconds) / self.fade_seconds if self.fade_seconds else 0.0
        return self.spike_rate - (self.spike_rate - self.quiet_rate) * faded


@dataclass(frozen=True, slots=True)
class Repo:
    name: str
    system: str
    headers: str
    files: tuple[tuple[str, str], ...]  # (path, content)


def generate(spec: WorkloadSpec, model: str) -> list[WorkItem]:
    """The same list of requests for the same spec, sorted by send time."""
    rng = random.Random(spec.seed)
    repos = [_repo(rng, index, spec.files_per_repo) for index in range(spec.repos)]
    developers = [(d % spec.repos, rng.sample(range(spec.files_per_repo), spec.files_per_developer))
                  for d in range(spec.developers)]
    items: list[WorkItem] = []
    at = rng.expovariate(spec.rate / spec.mean_burst)
    while at < spec.seconds:
        items.extend(_burst(rng, spec, at, repos, developers, model))
        at += rng.expovariate(spec.rate / spec.mean_burst)
    return sorted((i for i in items if i.at < spec.seconds), key=lambda i: i.at)


def generate_standup(spec: StandupSpec, model: str) -> list[WorkItem]:
    """The stand-up spike's requests for the same spec, sorted by send time (bursts thinned from the peak rate)."""
    rng = random.Random(spec.seed)
    repos = [_repo(rng, index, spec.files_per_repo) for index in range(spec.repos)]
    developers = [(d % spec.repos, rng.sample(range(spec.files_per_repo), spec.files_per_developer))
                  for d in range(spec.developers)]
    peak = max(spec.quiet_rate, spec.spike_rate) / spec.mean_burst
    items: list[WorkItem] = []
    at = rng.expovariate(peak)
    while at < spec.seconds:
        if rng.random() * peak < spec.rate_at(at) / spec.mean_burst:
            items.extend(_burst(rng, spec, at, repos, developers, model))
        at += rng.expovariate(peak)
    return sorted((i for i in items if i.at < spec.seconds), key=lambda i: i.at)


def _burst(rng, spec: WorkloadSpec, at: float, repos, developers, model: str):
    developer = rng.randrange(spec.developers)
    repo_index, files = developers[developer]
    repo = repos[repo_index]
    path, content = repo.files[files[0] if rng.random() < 0.6 else rng.choice(files)]
    size = 1 + _geometric(rng, spec.mean_burst - 1)
    for _ in range(size):
        chat = rng.random() < spec.chat_share
        endpoint, body, shared = _chat(repo, path, content, rng) if chat else _completion(repo, path, content, rng)
        yield WorkItem(at, endpoint, {"model": model, **body, "stream": True}, developer, repo_index, shared)
        at += rng.expovariate(1 / spec.burst_gap)


def _completion(repo: Repo, path: str, content: str, rng):
    typed = _code(rng, rng.randint(2, 5))
    prompt = f"{repo.system}\n{repo.headers}\n# file: {path}\n{content}{typed}"
    return "/v1/completions", {"prompt": prompt, "max_tokens": 16}, len(repo.system) + len(repo.headers) + 1


def _chat(repo: Repo, path: str, content: str, rng):
    question = f"\n\nWhy does `{rng.choice(WORDS)}_{rng.choice(WORDS)}` fail when the {rng.choice(WORDS)} is empty?"
    messages = [{"role": "system", "content": repo.system},
                {"role": "user", "content": f"{repo.headers}\n# file: {path}\n{content}{question}"}]
    return "/v1/chat/completions", {"messages": messages, "max_tokens": 64}, len(repo.system) + len(repo.headers)


def _repo(rng, index: int, files: int) -> Repo:
    name = f"acme/{rng.choice(WORDS)}-{rng.choice(WORDS)}-{index}"
    system = (f"You are the coding assistant of {name}. Follow its conventions exactly.\n"
              + "\n".join(f"- {_sentence(rng)}" for _ in range(16)))
    headers = (f"# Copyright {name} authors. Licensed under the Apache License 2.0.\n"
               + _code(rng, 36, prefix="from {a}.{b} import {c}_{d}\n"))
    return Repo(name, system, headers,
                tuple((f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}_{n}.py", _code(rng, rng.randint(30, 50)))
                      for n in range(files)))


def _sentence(rng) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))).capitalize() + "."


def _code(rng, lines: int, prefix: str = "    {a}_{b} = {c}.{d}({a})\n") -> str:
    return "".join(prefix.format(a=rng.choice(WORDS), b=rng.choice(WORDS), c=rng.choice(WORDS),
                                 d=rng.choice(WORDS)) for _ in range(lines))


def _geometric(rng, mean: float) -> int:
    """Failures before the first success, with the given mean (0 when mean is 0)."""
    if mean <= 0:
        return 0
    p, count = 1 / (mean + 1), 0
    while rng.random() > p:
        count += 1
    return count


def prompt_chars(item: WorkItem) -> int:
    body = item.body
    return len(body["prompt"]) if "prompt" in body else sum(len(m["content"]) for m in body["messages"])


def main() -> None:
    _print_routing()
    _print_standup()


def _print_standup() -> None:
    spec = StandupSpec.from_env()
    items = generate_standup(spec, "sim-coder")
    phases = (("quiet, before", 0, spec.step_at), ("spike (held)", spec.step_at, spec.step_at + spec.hold_seconds),
              ("fading", spec.step_at + spec.hold_seconds, spec.spike_ends), ("quiet, after", spec.spike_ends,
                                                                               spec.seconds))
    print(f"\nstand-up spike, seed {spec.seed}: {spec.quiet_rate:g} req/s, a step to {spec.spike_rate:g} req/s at "
          f"{spec.step_at:g} s held {spec.hold_seconds:g} s, back to quiet over {spec.fade_seconds:g} s; "
          f"{spec.seconds:g} s, {len(items)} requests\n")
    print("| phase | from s | to s | requests | req/s |")
    print("|---|---:|---:|---:|---:|")
    for name, begin, end in phases:
        count = sum(1 for i in items if begin <= i.at < end)
        print(f"| {name} | {begin:g} | {end:g} | {count} | {count / (end - begin):.1f} |")


def _print_routing() -> None:
    spec = WorkloadSpec.from_env()
    items = generate(spec, "sim-coder")
    chats = sum(1 for i in items if i.endpoint.endswith("chat/completions"))
    per_second = [0] * (int(spec.seconds) + 1)
    for item in items:
        per_second[int(item.at)] += 1
    sizes = [prompt_chars(i) for i in items]
    shared = statistics.mean(i.shared_chars / prompt_chars(i) for i in items)
    print(f"coding workload, seed {spec.seed}: {spec.developers} developers in {spec.repos} repositories, "
          f"{spec.seconds:g} s at {spec.rate:g} req/s on average\n")
    print("| requests | chat share | prompt chars p50 / max | shared repo prefix (share of prompt) | "
          "busiest second / mean per second | developers seen |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(f"| {len(items)} | {chats / len(items):.0%} | {statistics.median(sizes):,.0f} / {max(sizes):,} | "
          f"{shared:.0%} | {max(per_second)} / {len(items) / spec.seconds:.1f} | "
          f"{len({i.developer for i in items})} |")


if __name__ == "__main__":
    main()
