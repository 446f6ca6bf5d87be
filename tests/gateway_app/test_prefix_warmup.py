"""Prefix warm-up end to end: an engine that joins a prefix-affinity pool gets, from the real gateway, the recently
routed prompt heads whose home it becomes, so the next request of each such key finds its repository prompt in
the engine's prefix cache (its own `cached_tokens`), where without the warm-up it would prefill it whole.

Two simulator engines serve a shared deployment: one serving, one warm (not routed). Twelve repositories' prompts
(a long shared head each, the tenant's cache salt added by the gateway as for any shared engine) go through the
gateway, so all of them land on the serving engine; then the warm engine is promoted (a routing change on the
change bus) and each repository sends its next prompt.
"""
from __future__ import annotations

import random

import pytest

from fleet.models import Instance, InstanceRole
from fleet.transitions import set_role
from gateway.routing.policies.hash_ring import HashRing
from gateway.routing.policies.keys import prefix_key
from gateway.routing.policies.prefix_affinity import ring_key
from simulator.tokenizer import tokenize
from tests.gateway_app.conftest import MODEL, wait_for
from tests.gateway_app.helpers import add_deployment, generous_key, make_model_version, usage_rows

pytestmark = pytest.mark.django_db(transaction=True)
REPOSITORIES, BLOCK = 12, 16  # the simulator's default block size
ENGINE_ARGS = ("--decode-ms-per-token", "2", "--prefill-ms-per-token", "0.01", "--max-num-seqs", "32")
WORDS = ("tenant", "cache", "engine", "token", "policy", "route", "stream", "budget", "deploy", "prefix")


def repository_head(number: int) -> str:
    """A repository's shared prompt head: its system text and the file headers every prompt of it starts with."""
    rng = random.Random(number)
    lines = [f"# repository acme/service-{number}: follow its conventions"]
    lines += [f"from {rng.choice(WORDS)}.{rng.choice(WORDS)} import {rng.choice(WORDS)}_{n}" for n in range(70)]
    return "\n".join(lines) + "\n"


def prompt(number: int, turn: int) -> str:
    return f"{repository_head(number)}def step_{turn}_of_{number}(items):\n    return"


@pytest.fixture
def pool(simulators):
    """A shared deployment with a serving and a warm engine (fresh engines: empty caches)."""
    engines = [simulators(*ENGINE_ARGS) for _ in range(2)]
    deployment = add_deployment(make_model_version(MODEL), tenant=None, name="prefix-warmup",
                                urls=[engine.url for engine in engines])
    serving, warm = (Instance.objects.get(deployment=deployment, endpoint_url=engine.url) for engine in engines)
    set_role(warm.pk, InstanceRole.WARM)
    yield serving, warm
    for engine in engines:
        engine.stop()


def send_round(server, key: str, turn: int) -> None:
    for number in range(REPOSITORIES):
        answer = server.post("/v1/completions", key, {"model": MODEL, "prompt": prompt(number, turn), "max_tokens": 2},
                             headers={"x-switchyard-cache": "no"})
        assert answer.status_code == 200, answer.text


def homes(tenant_id: int, serving: Instance, warm: Instance) -> dict[int, str]:
    """Each repository's home engine on the two-engine ring (the key prefix affinity hashes)."""
    ring = HashRing(sorted([(str(serving.pk), 1.0), (str(warm.pk), 1.0)]))
    return {number: next(ring.walk(ring_key(str(tenant_id), prefix_key({"prompt": prompt(number, 1)}, "completion"))))
            for number in range(REPOSITORIES)}


def promote_and_send(gateway, tenant, pool, **config) -> tuple[object, dict[int, int]]:
    """Round 1 on the serving engine, promotion, round 2: the promoted engine's cached tokens per repository."""
    serving, warm = pool
    server = gateway(**config)
    key = generous_key(tenant)
    server.wait_synced()
    send_round(server, key, 1)
    set_role(warm.pk, InstanceRole.SERVING)
    server.wait_synced()
    warmer = server.app.state.warmer
    assert wait_for(lambda: not warmer.busy, timeout=30), "the warm-up did not finish"
    send_round(server, key, 2)
    wait_for(lambda: len(usage_rows(model_name=MODEL)) >= 2 * REPOSITORIES, timeout=10)
    rows = usage_rows(model_name=MODEL)
    assert len(rows) == 2 * REPOSITORIES and {r.instance_id for r in rows[:REPOSITORIES]} == {serving.pk}
    heads = {prompt(n, 2)[:60]: n for n in range(REPOSITORIES)}  # which repository each round-2 row is
    on_promoted = {}
    for row in rows[REPOSITORIES:]:
        if row.instance_id == warm.pk:
            on_promoted[heads[row.redacted_prompt[:60]]] = row.cached_tokens
    return warmer, on_promoted


def head_tokens(number: int) -> int:
    return len(tokenize(repository_head(number))) // BLOCK * BLOCK


def test_a_promoted_engine_has_the_prompt_heads_whose_home_it_became_cached(gateway, tenant_a, pool):
    warmer, on_promoted = promote_and_send(gateway, tenant_a, pool, prefix_warmup=REPOSITORIES)
    moved = {n for n, home in homes(tenant_a.id, *pool).items() if home == str(pool[1].pk)}
    assert moved, "no repository's home moved to the promoted engine: the test proves nothing"
    assert warmer.sent == len(moved)  # one head per key whose home it became, none for the others
    homed_there = {n: cached for n, cached in on_promoted.items() if n in moved}
    assert homed_there, on_promoted
    for number, cached in homed_there.items():
        # The whole head was in the promoted engine's cache before the repository's first request there.
        assert cached >= head_tokens(number), (number, cached, head_tokens(number))


def test_without_the_warm_up_the_promoted_engine_prefills_every_moved_head_whole(gateway, tenant_a, pool):
    """The control: the same traffic with the warm-up off finds nothing cached on the promoted engine."""
    warmer, on_promoted = promote_and_send(gateway, tenant_a, pool, prefix_warmup=0)
    moved = {n for n, home in homes(tenant_a.id, *pool).items() if home == str(pool[1].pk)}
    assert warmer.sent == 0
    assert {n: cached for n, cached in on_promoted.items() if n in moved}
    assert all(cached < BLOCK for n, cached in on_promoted.items()), on_promoted


def test_the_warm_up_sends_at_most_its_limit_most_recent_first(gateway, tenant_a, pool):
    warmer, on_promoted = promote_and_send(gateway, tenant_a, pool, prefix_warmup=2)
    moved = sorted(n for n, home in homes(tenant_a.id, *pool).items() if home == str(pool[1].pk))
    assert len(moved) > 2, "too few keys moved to show the limit"
    assert warmer.sent == 2
    # Round 1 sent the repositories in order: the last two moved are the most recent.
    warmed = {n for n, cached in on_promoted.items() if cached >= head_tokens(n)}
    assert set(moved[-2:]) <= warmed and not warmed & set(moved[:-2]), (moved, on_promoted)
