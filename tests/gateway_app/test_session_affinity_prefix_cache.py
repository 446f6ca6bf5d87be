"""Session affinity end to end: chat and completion sessions whose conversation grows turn by turn,
sent through the official `openai` client to a gateway in front of three simulator engines (one
least-outstanding pool).

With `x-switchyard-session` every turn of a session reaches the engine that served the previous one,
so the engines' own prefix-cache counters (`vllm:prefix_cache_hits` / `_queries`) show as many hits
as the repeated context allows; the same traffic without the header, spread by least-outstanding,
hits clearly less. When a session's engine dies, its sessions move to live engines (the gateway's
retry on another engine) and keep getting answers, with no failed request. docs/routing.md has the
figures.
"""
from __future__ import annotations

import collections
import random
import threading
import time
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from simulator.tokenizer import render_chat, tokenize
from tests.gateway_app.conftest import MODEL, client_for, wait_for
from tests.gateway_app.helpers import add_deployment, make_model_version, usage_rows

pytestmark = pytest.mark.django_db(transaction=True)
SESSION_HEADER = "x-switchyard-session"  # gateway/routing/versions.py
ENGINES, SESSIONS, TURNS, TURNS_AFTER_KILL = 3, 6, 6, 3
REPLY_TOKENS, BLOCK = 16, 16  # the simulator's default block size
# A pause before each turn, as a person or an agent takes: sessions in lock-step make least-outstanding
# sticky by accident (the engine that just answered is the least busy one), which is not the baseline.
THINK_SECONDS = 0.03
ENGINE_ARGS = ("--decode-ms-per-token", "2", "--prefill-ms-per-token", "0.01", "--max-num-seqs", "32")


@pytest.fixture
def engines(simulators):
    """Fresh engines: their cache counters start at zero, and one of them is killed."""
    started = [simulators(*ENGINE_ARGS) for _ in range(ENGINES)]
    yield started
    for engine in started:
        engine.stop()


class Conversation:
    """One session: a system prompt unique to it, then a user message and the answer per turn.

    A chat session sends its messages to /v1/chat/completions; a completion session (an agent that
    renders its own prompt) sends the same conversation rendered as one prompt to /v1/completions.
    """

    def __init__(self, tag: str, session: str | None, kind: str):
        self.session, self.tag, self.kind = session, tag, kind
        system = f"You are the coding agent of session {tag}. " + "Follow the repository's conventions. " * 8
        self.messages = [{"role": "system", "content": system}]
        self.turns: list[tuple[str, list[str], list[str]]] = []  # (request id, prompt tokens, answer tokens)
        self.failures: list[Exception] = []

    def turn(self, client) -> None:
        number = len(self.turns) + len(self.failures)
        self.messages.append({"role": "user", "content": f"Step {number} of {self.tag}: " + "refactor it. " * 12})
        # The simulator renders a chat as simulator/tokenizer.py's render_chat does: the same text either way.
        prompt = render_chat(self.messages)
        try:
            answer, request_id = self._send(client, prompt)
        except Exception as exc:  # reported by the test: no request may fail
            self.failures.append(exc)
            self.messages.pop()
            return
        # What the engine holds afterwards: the prompt's tokens, then the answer's (which re-tokenize alike).
        self.turns.append((request_id, tokenize(prompt), tokenize(answer)))
        self.messages.append({"role": "assistant", "content": answer})

    def _send(self, client, prompt: str) -> tuple[str, str]:
        headers = {"x-switchyard-cache": "no"} | ({SESSION_HEADER: self.session} if self.session else {})
        if self.kind == "chat":
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL, messages=self.messages, max_tokens=REPLY_TOKENS, extra_headers=headers)
            return raw.parse().choices[0].message.content, raw.headers["x-request-id"]
        raw = client.completions.with_raw_response.create(model=MODEL, prompt=prompt, max_tokens=REPLY_TOKENS,
                                                          extra_headers=headers)
        return raw.parse().choices[0].text, raw.headers["x-request-id"]


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


def repeatable_share(conversations) -> float:
    """The share of prompt tokens an engine that served the session's previous turn can hit, at best.

    As simulator/kv_cache.py models vLLM: whole blocks of the prompt that the previous turn's prompt
    and answer filled, the prompt's last token always computed again.
    """
    repeated = total = 0
    for conversation in conversations:
        for index, (_, prompt, _) in enumerate(conversation.turns):
            before = conversation.turns[index - 1][1] + conversation.turns[index - 1][2] if index else []
            common = next((i for i, (a, b) in enumerate(zip(prompt, before)) if a != b), min(len(prompt), len(before)))
            repeated += min(common // BLOCK, (len(prompt) - 1) // BLOCK) * BLOCK
            total += len(prompt)
    return repeated / total


def engines_by_turn(conversation: Conversation, first_turn: int = 0) -> list[int]:
    """The engine (instance id) that served each turn, from the usage rows the gateway metered."""
    ids = [request_id for request_id, _, _ in conversation.turns[first_turn:]]
    rows = wait_for(lambda: (r := usage_rows(request_id__in=ids)) and len(r) == len(ids) and r, timeout=10)
    assert rows, "every request is metered"
    by_id = {row.request_id: row.instance_id for row in rows}
    return [by_id[request_id] for request_id in ids]


def session_moves(server) -> float:
    """The gateway's count of sessions moved off their engine (over the load bound, or the engine failed)."""
    return server.app.metrics.session_placements.labels("moved")._value.get()


def changes(served_by: list[int]) -> int:
    return sum(a != b for a, b in zip(served_by, served_by[1:]))


def ratio(before: tuple[float, float], after: tuple[float, float]) -> float:
    return (after[0] - before[0]) / (after[1] - before[1])


def test_a_sessions_growing_context_stays_in_one_prefix_cache_and_moves_when_its_engine_dies(
        gateway, alice, engines):
    from fleet.models import Instance

    deployment = add_deployment(make_model_version(MODEL), tenant=None, name="trio",
                                urls=[e.url for e in engines], routing_policy="least_outstanding")
    server = gateway(connect_timeout=1.0)
    server.wait_until_serving(alice.key.raw, MODEL)
    client = client_for(server, alice.key.raw)
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

    # (a) each session stayed on one engine: no change of engine the gateway did not report as a move
    # (which happens only over the load bound; none did in the runs measured).
    served = {c.session: engines_by_turn(c) for c in pinned}
    moves = session_moves(server)
    print(f"engines per session: {served}; sessions moved: {moves:.0f}")
    assert sum(changes(s) for s in served.values()) == moves
    # (b) with affinity nearly every repeated token hits; without it, clearly fewer.
    assert with_affinity >= 0.95 * best
    assert without <= with_affinity - 0.1

    # (c) the engine holding the most sessions dies: its sessions move to live engines and keep getting answers.
    urls = dict(Instance.objects.filter(deployment=deployment).values_list("id", "endpoint_url"))
    victim_id, _ = collections.Counter(s[-1] for s in served.values()).most_common(1)[0]
    victim = next(e for e in engines if e.url == urls[victim_id])
    orphans = [c for c in pinned if served[c.session][-1] == victim_id]
    victim.stop()
    before_kill = cache_counters(engines)
    run_turns(client, pinned, TURNS_AFTER_KILL)
    assert [c.failures for c in pinned] == [[]] * SESSIONS  # the gateway's retry on another engine covered it
    after = {c.session: engines_by_turn(c, first_turn=TURNS) for c in pinned}
    moved_after_kill = session_moves(server) - moves
    print(f"after killing instance {victim_id}: engines per session {after}; hit ratio "
          f"{ratio(before_kill, cache_counters(engines)):.3f}; sessions moved {moved_after_kill:.0f}")
    assert all(victim_id not in s for s in after.values())
    assert server.app.metrics.retries.labels(MODEL)._value.get() >= 1  # a request refused by the dead engine
    assert all(after[c.session][0] != victim_id for c in orphans)
    # Every change of engine is a move the gateway made (a session may also have been moved onto the dead
    # engine before it was ejected, and moved again by the retry: a move no engine change shows).
    assert sum(changes(served[s] + after[s]) for s in served) <= session_moves(server)
