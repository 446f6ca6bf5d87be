"""Session affinity end to end: chat and completion sessions whose conversation grows turn by turn,
sent through the official `openai` client to gateways in front of three simulator engines (one
least-outstanding pool).

With `x-switchyard-session` a session's turns reach its engine, the one every gateway process pins it
to, except single requests spilled while that engine is over the load bound; a turn served where the
previous one was hits all the context that turn left (the engine's own `cached_tokens`), and the
engines' prefix-cache counters (`vllm:prefix_cache_hits` / `_queries`) show clearly more hits than
the same traffic without the header. When a session's engine dies, its sessions move once, to the
engine any process would pick, and keep getting answers: no request fails. Two gateways taking
turns of the same sessions pin them alike. docs/routing.md has the figures.
"""
from __future__ import annotations

import collections
import random
import threading
import time
import uuid
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleet.models import Instance
from gateway.routing.policies import Endpoint, RouteRequest, get_policy
from gateway.routing.policies.session_affinity import SessionPins
from simulator.tokenizer import render_chat, tokenize
from tests.gateway_app.conftest import MODEL, client_for, wait_for
from tests.gateway_app.helpers import add_deployment, generous_key, make_model_version, usage_rows

pytestmark = pytest.mark.django_db(transaction=True)
SESSION_HEADER = "x-switchyard-session"  # gateway/routing/versions.py
ENGINES, SESSIONS, TURNS, TURNS_AFTER_KILL = 3, 30, 6, 3
REPLY_TOKENS, BLOCK = 16, 16  # the simulator's default block size
# A pause before each turn, as a person or an agent takes: sessions in lock-step make least-outstanding
# sticky by accident (the engine that just answered is the least busy one), which is not the baseline.
THINK_SECONDS = 0.05
ENGINE_ARGS = ("--decode-ms-per-token", "2", "--prefill-ms-per-token", "0.01", "--max-num-seqs", "32")


@pytest.fixture
def engines(simulators):
    """Fresh engines: their cache counters start at zero, and one of them is killed."""
    started = [simulators(*ENGINE_ARGS) for _ in range(ENGINES)]
    yield started
    for engine in started:
        engine.stop()


@dataclass
class Turn:
    request_id: str
    prompt: list[str]  # tokens, as the simulator cuts them
    answer: list[str]
    cached: int  # prompt tokens the engine found in its prefix cache (its usage.prompt_tokens_details)


class Conversation:
    """One session: a system prompt unique to it, then a user message and the answer per turn.

    A chat session sends its messages to /v1/chat/completions; a completion session (an agent that
    renders its own prompt) sends the same conversation rendered as one prompt to /v1/completions.
    """

    def __init__(self, tag: str, session: str | None, kind: str):
        self.session, self.tag, self.kind = session, tag, kind
        system = f"You are the coding agent of session {tag}. " + "Follow the repository's conventions. " * 8
        self.messages = [{"role": "system", "content": system}]
        self.turns: list[Turn] = []
        self.failures: list[Exception] = []

    def turn(self, client) -> None:
        number = len(self.turns) + len(self.failures)
        self.messages.append({"role": "user", "content": f"Step {number} of {self.tag}: " + "refactor it. " * 12})
        # The simulator renders a chat as simulator/tokenizer.py's render_chat does: the same text either way.
        prompt = render_chat(self.messages)
        try:
            answer, request_id, usage = self._send(client, prompt)
        except Exception as exc:  # reported by the test: no request may fail
            self.failures.append(exc)
            self.messages.pop()
            return
        # What the engine holds afterwards: the prompt's tokens, then the answer's (which re-tokenize alike).
        self.turns.append(Turn(request_id, tokenize(prompt), tokenize(answer),
                               usage.prompt_tokens_details.cached_tokens))
        self.messages.append({"role": "assistant", "content": answer})

    def _send(self, client, prompt: str):
        headers = {"x-switchyard-cache": "no"} | ({SESSION_HEADER: self.session} if self.session else {})
        if self.kind == "chat":
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL, messages=self.messages, max_tokens=REPLY_TOKENS, extra_headers=headers)
            answer = raw.parse()
            return answer.choices[0].message.content, raw.headers["x-request-id"], answer.usage
        raw = client.completions.with_raw_response.create(model=MODEL, prompt=prompt, max_tokens=REPLY_TOKENS,
                                                          extra_headers=headers)
        answer = raw.parse()
        return answer.choices[0].text, raw.headers["x-request-id"], answer.usage


def conversations(prefix: str, with_session: bool) -> list[Conversation]:
    """SESSIONS conversations, chat and completion sessions alternating."""
    return [Conversation(f"{prefix}-{i}", f"{prefix}-{i}" if with_session else None,
                         "chat" if i % 2 == 0 else "completion") for i in range(SESSIONS)]


def run_turns(client, conversations, turns: int) -> None:
    """Every conversation takes `turns` turns, all conversations at once (each one turn after another)."""
    start = threading.Barrier(len(conversations))

    def converse(conversation: Conversation) -> None:
        think = random.Random(conversation.tag)
        start.wait()
        for _ in range(turns):
            time.sleep(think.uniform(0, THINK_SECONDS))
            conversation.turn(client)

    threads = [threading.Thread(target=converse, args=(c,)) for c in conversations]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a session hung"


def cache_counters(engines) -> tuple[float, float]:
    """(hits, queries) in tokens, summed over the live engines' /metrics."""
    hits = queries = 0.0
    for engine in engines:
        if engine.proc.poll() is not None:
            continue
        for family in text_string_to_metric_families(httpx.get(engine.url + "/metrics", timeout=10).text):
            for sample in family.samples:
                if sample.name == "vllm:prefix_cache_hits_total":
                    hits += sample.value
                elif sample.name == "vllm:prefix_cache_queries_total":
                    queries += sample.value
    return hits, queries


def repeatable(conversation: Conversation, index: int) -> int:
    """Prompt tokens of a turn the engine that served the previous turn can hit, at most.

    As simulator/kv_cache.py models vLLM: whole blocks of the prompt that the previous turn's prompt
    and answer filled, the prompt's last token always computed again.
    """
    prompt = conversation.turns[index].prompt
    if index == 0:
        return 0
    before = conversation.turns[index - 1].prompt + conversation.turns[index - 1].answer
    common = next((i for i, (a, b) in enumerate(zip(prompt, before)) if a != b), min(len(prompt), len(before)))
    return min(common // BLOCK, (len(prompt) - 1) // BLOCK) * BLOCK


def repeatable_share(conversations) -> float:
    """The share of all prompt tokens that repeat from the session's previous turn."""
    repeated = sum(repeatable(c, i) for c in conversations for i in range(len(c.turns)))
    return repeated / sum(len(turn.prompt) for c in conversations for turn in c.turns)


def engines_by_turn(conversation: Conversation, first_turn: int = 0) -> list[int]:
    """The engine (instance id) that served each turn, from the usage rows the gateway metered."""
    ids = [turn.request_id for turn in conversation.turns[first_turn:]]
    rows = wait_for(lambda: (r := usage_rows(request_id__in=ids)) and len(r) == len(ids) and r, timeout=10)
    assert rows, "every request is metered"
    by_id = {row.request_id: row.instance_id for row in rows}
    return [by_id[request_id] for request_id in ids]


def placements(server) -> collections.Counter:
    """The gateway's session decisions: each request kept, placed or moved (its engine failed); and spilled
    (served elsewhere once, its engine over the load bound)."""
    counter = server.app.metrics.session_placements
    return collections.Counter({r: counter.labels(r)._value.get() for r in ("kept", "placed", "moved", "spilled")})


def ratio(before: tuple[float, float], after: tuple[float, float]) -> float:
    return (after[0] - before[0]) / (after[1] - before[1])


def test_a_sessions_growing_context_stays_in_one_prefix_cache_and_moves_when_its_engine_dies(
        gateway, alice, engines):
    deployment = add_deployment(make_model_version(MODEL), tenant=None, name="trio",
                                urls=[e.url for e in engines], routing_policy="least_outstanding")
    server, raw_key = gateway(connect_timeout=1.0), generous_key(alice.tenant)  # no request is rate limited
    server.wait_until_serving(raw_key, MODEL)
    client = client_for(server, raw_key)
    run = uuid.uuid4().hex[:6]

    # The same traffic twice in one run, each conversation its own (no cache hit from the other run):
    # without the header least-outstanding places every turn; with it each session keeps its engine.
    plain, pinned = conversations(f"plain-{run}", False), conversations(f"agent-{run}", True)
    counters = [cache_counters(engines)]
    run_turns(client, plain, TURNS)
    counters.append(cache_counters(engines))
    run_turns(client, pinned, TURNS)
    counters.append(cache_counters(engines))
    assert [c.failures for c in plain + pinned] == [[]] * (2 * SESSIONS)
    without, with_affinity = ratio(counters[0], counters[1]), ratio(counters[1], counters[2])
    best = repeatable_share(pinned)
    print(f"\nprefix-cache hit ratio over {SESSIONS} sessions x {TURNS} turns on {ENGINES} engines: "
          f"without session header {without:.3f}, with it {with_affinity:.3f}, repeatable share {best:.3f}")

    # (a) each session stayed on its engine, the one any gateway process pins it to: no pin moved (no
    # engine failed), and every request served elsewhere was spilled (its engine over the load bound).
    served = {c.session: engines_by_turn(c) for c in pinned}
    home, decided = homes(alice.tenant.id, deployment, served), placements(server)
    print(f"gateway's session decisions: {dict(decided)}")
    assert (decided["placed"], decided["kept"], decided["moved"]) == (SESSIONS, SESSIONS * (TURNS - 1), 0)
    assert off_home(served, home) <= decided["spilled"]
    # (b) a turn served where the previous one was hits all the context that turn left there, so the
    # engines' hit ratio is near the repeatable share (spills cost a little); without the header, clearly less.
    assert short_of_repeatable(pinned, served) == []
    assert with_affinity >= 0.8 * best and with_affinity >= without + 0.1

    # (c) the engine holding the most sessions dies: each of its sessions moves once, to the next engine of
    # its walk (the gateway's retry of the request the dead engine refused), and keeps getting answers there.
    urls = dict(Instance.objects.filter(deployment=deployment).values_list("id", "endpoint_url"))
    victim_id, _ = collections.Counter(home.values()).most_common(1)[0]
    victim = next(e for e in engines if e.url == urls[victim_id])
    orphans = [session for session, engine in home.items() if engine == victim_id]
    victim.stop()
    before_kill = cache_counters(engines)
    run_turns(client, pinned, TURNS_AFTER_KILL)
    assert [c.failures for c in pinned] == [[]] * SESSIONS
    after = {c.session: engines_by_turn(c, first_turn=TURNS) for c in pinned}
    decided_after = placements(server) - decided
    print(f"after killing instance {victim_id}: hit ratio "
          f"{ratio(before_kill, cache_counters(engines)):.3f}; gateway's session decisions: {dict(decided_after)}")
    assert all(victim_id not in s for s in after.values())
    assert server.app.metrics.retries.labels(MODEL)._value.get() >= 1  # a request refused by the dead engine
    assert decided_after["moved"] == len(orphans)  # each once; the others stay
    assert off_home(after, homes(alice.tenant.id, deployment, after, down=victim_id)) <= decided_after["spilled"]
    assert short_of_repeatable(pinned, {s: served[s] + after[s] for s in served}) == []


def short_of_repeatable(conversations, served: dict) -> list[tuple[str, int, int, int]]:
    """(session, turn, cached, repeatable) of each turn served by its previous turn's engine yet hitting less."""
    short = []
    for conversation in conversations:
        engines = served[conversation.session]
        for index in range(1, len(conversation.turns)):
            cached, best = conversation.turns[index].cached, repeatable(conversation, index)
            if engines[index] == engines[index - 1] and cached < best:
                short.append((conversation.session, index, cached, best))
    return short


def homes(tenant_id: int, deployment, sessions, down: int | None = None) -> dict[str, int]:
    """The engine any gateway process pins each session to: the first eligible one of its ring walk."""
    ids = Instance.objects.filter(deployment=deployment).values_list("id", flat=True)
    endpoints = [Endpoint(str(i), "", ejected=i == down) for i in ids]
    pins, policy = SessionPins(), get_policy("least_outstanding")
    return {s: int(pins.choose(policy, endpoints, RouteRequest(str(tenant_id), MODEL, session=s)).id) for s in sessions}


def off_home(served: dict[str, list[int]], home: dict[str, int]) -> int:
    """Requests not served by their session's engine."""
    return sum(engine != home[session] for session, engines in served.items() for engine in engines)


class Alternating:
    """Sends each request through the next of several gateways' clients (a load balancer in front of them)."""

    def __init__(self, clients):
        self._clients, self._next = clients, 0
        self._lock = threading.Lock()

    def __getattr__(self, name):
        with self._lock:
            client = self._clients[self._next % len(self._clients)]
            self._next += 1
        return getattr(client, name)


def test_a_session_keeps_its_engine_across_gateway_processes(gateway, alice, engines):
    deployment = add_deployment(make_model_version(MODEL), tenant=None, name="trio",
                                urls=[e.url for e in engines], routing_policy="least_outstanding")
    servers, raw_key = [gateway(), gateway()], generous_key(alice.tenant)
    for server in servers:
        server.wait_until_serving(raw_key, MODEL)
    pinned = conversations(f"agent-{uuid.uuid4().hex[:6]}", True)
    before = cache_counters(engines)
    run_turns(Alternating([client_for(s, raw_key) for s in servers]), pinned, TURNS)
    assert [c.failures for c in pinned] == [[]] * SESSIONS
    measured, best = ratio(before, cache_counters(engines)), repeatable_share(pinned)
    served = {c.session: engines_by_turn(c) for c in pinned}
    decided = [placements(s) for s in servers]
    print(f"\ntwo gateways, turns alternating: hit ratio {measured:.3f}, repeatable share {best:.3f}; "
          f"session decisions {[dict(d) for d in decided]}")
    # Each gateway pins each session on its own, to the same engine: only spills go elsewhere.
    assert off_home(served, homes(alice.tenant.id, deployment, served)) <= sum(d["spilled"] for d in decided)
    assert measured >= 0.75 * best
