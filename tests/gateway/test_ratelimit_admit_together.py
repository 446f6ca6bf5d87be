"""Several admissions in one ADMIT_TOGETHER call decide and leave Redis as one ADMIT call each would.

The admissions of one event-loop iteration go to Redis as one script call (`RateLimiter._admit_soon`).
These tests run random rounds of admissions at fixed Redis times once as one ADMIT call each and
once as one ADMIT_TOGETHER call per round, and compare every answer and every key the limiter
wrote; then they check over the pipelined client what the gateway sees.
"""
import asyncio
import random

import pytest
import redis

from gateway.clients.pipelined_redis import PipelinedRedis, encode_command
from gateway.limits.admission import (
    ADMIT,
    ADMIT_TOGETHER,
    SETTLE,
    LimiterConfig,
    Limits,
    Outcome,
    RateLimiter,
    Subject,
    SubjectKind,
    _packed_together,
    month_bounds,
)
from tests.gateway.ratelimit_helpers import admission, redis_url, tenant
from tests.gateway.test_ratelimit_settle_together import NOW_US, at_time, state

URL = redis_url()
pytestmark = pytest.mark.skipif(URL is None, reason="needs Redis: set REDIS_URL or run one on 127.0.0.1:6379")
# Short windows, leases and reservations, so that over the rounds rates recover, leases lapse
# (dropped once a set is full) and reservations lapse (given back): every path of the script runs.
CONFIG = dict(window_seconds=4, lease_seconds=1.5, reservation_seconds=2.5)
MONTH = month_bounds(NOW_US / 1e6)[0]


def random_subjects(rng: random.Random) -> list[Subject]:
    """A pool of subjects with small random limits (some unset), so that many admissions are refused."""
    def maybe(low, high):
        return rng.randint(low, high) if rng.random() < 0.6 else None
    pool = []
    for kind, sid in ((SubjectKind.TENANT, "t1"), (SubjectKind.USER, "u1"), (SubjectKind.KEY, "k1"),
                      (SubjectKind.KEY, "k2")):
        pool.append(Subject(kind, sid, Limits(
            requests_per_minute=maybe(2, 8), tokens_per_minute=maybe(300, 4000), concurrent_requests=maybe(1, 4),
            monthly_tokens=maybe(800, 8000), monthly_cost_micros=maybe(500, 5000),
            # what the usage records say was spent: budget hashes start from it, and count at least it
            monthly_tokens_floor=(MONTH, rng.randint(0, 6000)) if rng.random() < 0.5 else None)))
    return pool


def random_rounds(seed: int) -> list[list[tuple]]:
    """Rounds of (subjects, prompt tokens, max tokens, cost, request id); a subject may be listed twice."""
    rng = random.Random(seed)
    pool = random_subjects(rng)
    rounds = []
    for r in range(rng.randint(4, 8)):
        admissions = []
        for i in range(rng.randint(2, 7)):
            subjects = rng.sample(pool, rng.randint(1, 3))
            if rng.random() < 0.1:
                subjects.append(subjects[0])  # its keys twice in one admission
            admissions.append((tuple(subjects), rng.choice((0, 10, 100, 400)), rng.choice((0, 50, 300)),
                               rng.choice((0, 100, 700)), f"r{r}-{i}"))
        rounds.append(admissions)
    return rounds


def calls(limiter: RateLimiter, round_: list[tuple]) -> list[tuple]:
    """(plan, request id, numbers) of each admission of a round; skipped: those refused without Redis."""
    out = []
    for subjects, prompt, max_tokens, cost, request_id in round_:
        request = admission(subjects, prompt=prompt, max_tokens=max_tokens, cost=cost)
        plan = limiter._plan(request, NOW_US / 1e6)
        if plan.checks and not plan.impossible:
            out.append((plan, request_id, (request.worst_case_tokens, cost, 0, 0)))
    return out


def run_rounds(r: redis.Redis, prefix: str, rounds, together: bool, script: str = ADMIT_TOGETHER) -> list:
    """Every round at its own fixed time; the answers (9 integers each) and the state after each round."""
    limiter = RateLimiter(r, LimiterConfig(prefix=prefix, **CONFIG))
    seen = []
    for number, round_ in enumerate(rounds):
        now = NOW_US + number * 700_000
        admissions = calls(limiter, round_)
        if together:
            keys = [key for plan, _, _ in admissions for key in plan.keys]
            values = [value for plan, rid, numbers in admissions for value in plan.argv(rid, numbers)]
            answers = r.eval(at_time(script, now), len(keys), *keys, *values)
        else:
            answers = [value for plan, rid, numbers in admissions
                       for value in r.eval(at_time(ADMIT, now), len(plan.keys), *plan.keys, *plan.argv(rid, numbers))]
        seen.append((answers, state(r, prefix)))
    return seen


@pytest.mark.parametrize("seed", range(40))
def test_admissions_in_one_call_answer_and_leave_what_one_call_each_would(prefix, seed):
    r = redis.Redis.from_url(URL)
    rounds = random_rounds(seed)
    one_by_one = run_rounds(r, f"{prefix}:one", rounds, together=False)
    together = run_rounds(r, f"{prefix}:all", rounds, together=True)
    for (answers, before), (answers_together, after) in zip(one_by_one, together):
        assert answers_together == answers
        assert after == before
    admitted = [answers[at] for answers, _ in one_by_one for at in range(0, len(answers), 9)]
    assert 0 < sum(admitted) < len(admitted)  # some admitted, some refused
    r.close()


def test_the_comparison_fails_for_a_script_that_forgets_earlier_admissions_of_its_call(prefix):
    """The check above can fail: a script whose admissions all see the state before the call differs."""
    forgetful = ADMIT_TOGETHER.replace("tats[key] = rate[6 * rk - 4]", "local _ = rate[6 * rk - 4]") \
        .replace("set_tat(key, tats[key], stored[key], now)", "set_tat(key, tats[key] or now, stored[key], now)")
    assert forgetful != ADMIT_TOGETHER
    r = redis.Redis.from_url(URL)
    differs = 0
    for seed in range(10):
        rounds = random_rounds(seed)
        one_by_one = run_rounds(r, f"{prefix}:{seed}:one", rounds, together=False)
        broken = run_rounds(r, f"{prefix}:{seed}:bad", rounds, together=True, script=forgetful)
        differs += one_by_one != broken
    assert differs
    r.close()


def test_admissions_sent_together_are_encoded_as_one_evalsha():
    limiter = RateLimiter(redis.Redis(), LimiterConfig(prefix="p"))  # never connects: only plans are built
    rounds = random_rounds(1)
    admissions = calls(limiter, rounds[0])
    keys = [key for plan, _, _ in admissions for key in plan.keys]
    values = [value for plan, rid, numbers in admissions for value in plan.argv(rid, numbers)]
    assert _packed_together("f" * 40, admissions) == encode_command(("EVALSHA", "f" * 40, len(keys), *keys, *values))


def pipelined(scenario, prefix, **config):
    async def main():
        client = PipelinedRedis.from_url(URL, timeout_seconds=5)
        limiter = RateLimiter(client, LimiterConfig(prefix=prefix, timeout_seconds=5, **config))
        built = []
        send_later = client.send_later

        def spy(build, deliver):
            send_later(lambda: built.append(build()) or built[-1], deliver)
        limiter._send_later = spy
        try:
            await limiter.admit(admission(tenant(requests_per_minute=1000), tenant="warm-up"))  # loads the scripts
            return await scenario(limiter, built)
        finally:
            await client.aclose()
    return asyncio.run(main())


def test_one_iterations_admissions_leave_as_one_call_and_a_lone_one_as_admit(prefix):
    async def scenario(limiter, built):
        subjects = tenant(concurrent_requests=3, tokens_per_minute=10_000)
        decisions = await asyncio.gather(*(limiter.admit(admission(subjects)) for _ in range(5)))
        lone = await limiter.admit(admission(subjects))
        return [d.allowed for d in decisions], lone.allowed, built, limiter._sha
    allowed, lone, built, shas = pipelined(scenario, prefix)
    assert allowed == [True, True, True, False, False] and lone is False
    assert len(built) == 2
    assert shas[ADMIT_TOGETHER].encode() in built[0] and shas[ADMIT].encode() in built[1]


def test_each_admission_gets_its_own_answer_and_headers(prefix):
    async def scenario(limiter, built):
        subjects = tenant(requests_per_minute=3, tokens_per_minute=1000)
        return await asyncio.gather(*(limiter.admit(admission(subjects, prompt=100, max_tokens=i * 100))
                                      for i in range(5)))
    decisions = pipelined(scenario, prefix, window_seconds=3600)
    assert [d.allowed for d in decisions] == [True, True, True, False, False]
    assert [d.headers["x-ratelimit-remaining-requests"] for d in decisions] == ["2", "1", "0", "0", "0"]
    assert [d.headers["x-ratelimit-remaining-tokens"] for d in decisions[:3]] == ["900", "700", "400"]


def test_a_settle_queued_before_an_admission_runs_before_it_also_when_admissions_are_queued(prefix):
    async def scenario(limiter, built):
        one = tenant(concurrent_requests=1)
        other = [Subject(SubjectKind.TENANT, "t1", Limits(requests_per_minute=1000))]
        held = await limiter.admit(admission(one))
        first = limiter.admit(admission(other, tenant="t2"))  # opens an admit call
        task = asyncio.ensure_future(first)
        await asyncio.sleep(0)  # it is queued, not written
        limiter.settle_soon(held.reservation, 0)
        second = await limiter.admit(admission(one))  # after the settle: its slot is free
        return (await task).allowed, second.allowed
    assert pipelined(scenario, prefix) == (True, True)


def test_admissions_sent_together_after_a_redis_restart_are_sent_again_each(prefix):
    async def scenario(limiter, built):
        limiter._sha[ADMIT] = limiter._sha[ADMIT_TOGETHER] = "0" * 40  # NOSCRIPT, as after a restart
        subjects = tenant(concurrent_requests=2)
        decisions = await asyncio.gather(*(limiter.admit(admission(subjects)) for _ in range(3)))
        again = await asyncio.gather(*(limiter.admit(admission(subjects)) for _ in range(2)))
        return [d.outcome for d in decisions + again], len(built), limiter._sha[ADMIT_TOGETHER]
    outcomes, sent, sha = pipelined(scenario, prefix)
    assert outcomes == [Outcome.ADMITTED, Outcome.ADMITTED, Outcome.LIMITED, Outcome.LIMITED, Outcome.LIMITED]
    assert sent == 2 and sha != "0" * 40  # the first call, then together again with the script loaded


def test_admissions_sent_together_to_an_unanswering_redis_answer_per_policy_in_time():
    async def scenario():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
        client = PipelinedRedis(port=server.sockets[0].getsockname()[1])
        limiter = RateLimiter(client, LimiterConfig(prefix="sy:test:mute", timeout_seconds=0.1))
        limiter._sha[ADMIT] = limiter._sha[ADMIT_TOGETHER] = "0" * 40
        loop = asyncio.get_running_loop()
        started = loop.time()
        both = asyncio.gather(limiter.admit(admission(tenant(monthly_tokens=10))),
                              limiter.admit(admission(tenant(requests_per_minute=9))))
        decisions = await asyncio.wait_for(both, 5)
        elapsed = loop.time() - started
        await client.aclose()
        server.close()
        return decisions, elapsed
    (budget, rate), elapsed = asyncio.run(scenario())
    assert budget.outcome == Outcome.LIMITER_UNAVAILABLE
    assert rate.outcome == Outcome.ADMITTED and rate.reservation is None
    assert 0.09 < elapsed  # it waited for the limiter's timeout; wait_for above catches a hang


def test_admissions_sent_together_to_an_unreachable_redis_answer_per_policy():
    async def scenario():
        client = PipelinedRedis(port=1, connect_timeout=0.1)  # nothing listens there
        limiter = RateLimiter(client, LimiterConfig(prefix="sy:test:gone", timeout_seconds=0.1))
        limiter._sha[ADMIT] = limiter._sha[ADMIT_TOGETHER] = limiter._sha[SETTLE] = "0" * 40
        rounds = []
        for _ in range(2):  # the second round finds the client down: refused at once, not queued
            rounds.append(await asyncio.gather(limiter.admit(admission(tenant(monthly_tokens=10))),
                                               limiter.admit(admission(tenant(requests_per_minute=9)))))
        await client.aclose()
        return rounds
    for budget, rate in asyncio.run(scenario()):
        assert budget.outcome == Outcome.LIMITER_UNAVAILABLE
        assert rate.outcome == Outcome.ADMITTED and rate.reservation is None


@pytest.mark.parametrize("script", ["ADMIT", "ADMIT_TOGETHER"])
def test_a_lapsed_reservation_of_nothing_is_given_back_without_error(prefix, script):
    """A budget reservation of 0 (a request priced at 0) that lapses: giving back -0 once made HINCRBY fail."""
    r = redis.Redis.from_url(URL)
    limiter = RateLimiter(r, LimiterConfig(prefix=prefix, reservation_seconds=1))
    text = {"ADMIT": ADMIT, "ADMIT_TOGETHER": ADMIT_TOGETHER}[script]
    answers = []
    for at, cost in ((NOW_US, 0), (NOW_US + 2_000_000, 100)):  # the second comes after the first lapsed
        request = admission([Subject(SubjectKind.KEY, "k", Limits(monthly_cost_micros=1000))], cost=cost)
        plan = limiter._plan(request, NOW_US / 1e6)
        answers.append(r.eval(at_time(text, at), len(plan.keys), *plan.keys,
                              *plan.argv(request.request_id, (request.worst_case_tokens, cost, 0, 0)))[0])
    assert answers == [1, 1]
    r.close()


def test_32_simultaneous_first_requests_against_a_budget_that_fits_3_admit_exactly_3(prefix):
    async def scenario(limiter, built):
        subjects = tenant(monthly_tokens=900)
        decisions = await asyncio.gather(*(limiter.admit(admission(subjects, prompt=100, max_tokens=200))
                                           for _ in range(32)))
        return sum(d.allowed for d in decisions), len(built)
    assert pipelined(scenario, prefix) == (3, 1)
