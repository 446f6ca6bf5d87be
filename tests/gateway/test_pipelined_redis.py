"""The pipelined Redis client of the request path, and the limiter over it (needs Redis)."""
import asyncio
import multiprocessing
import socket

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from gateway.clients.pipelined_redis import PipelinedRedis, encode_command, parse_reply
from gateway.limits.admission import ADMIT, SETTLE, FailurePolicy, LimiterConfig, Outcome, RateLimiter
from tests.gateway.ratelimit_helpers import SLOW_WINDOW, admission, redis_url, tenant

URL = redis_url()
needs_redis = pytest.mark.skipif(URL is None, reason="needs Redis: set REDIS_URL or run one on 127.0.0.1:6379")


def run(scenario, prefix, **config):
    async def main():
        client = PipelinedRedis.from_url(URL, timeout_seconds=5)
        try:
            return await scenario(RateLimiter(client, LimiterConfig(prefix=prefix, timeout_seconds=5, **config)))
        finally:
            await client.aclose()
    return asyncio.run(main())


def test_commands_encode_and_replies_parse_in_pieces():
    assert encode_command(("SET", "k", b"v\r\n", 12)) == b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nv\r\n\r\n$2\r\n12\r\n"
    data = b"*4\r\n:1\r\n$-1\r\n$5\r\nab\r\nc\r\n*1\r\n+OK\r\n-NOSCRIPT gone\r\n"
    reply, end = parse_reply(bytearray(data), 0)
    assert reply == [1, None, b"ab\r\nc", [b"OK"]]
    assert isinstance(parse_reply(bytearray(data), end)[0], NoScriptError)
    with pytest.raises(Exception):  # noqa: B017  cut anywhere inside a reply: incomplete, never a wrong value
        parse_reply(bytearray(data[:20]), 0)


@needs_redis
def test_pipelined_client_answers_in_order_and_raises_redis_errors(prefix):
    async def scenario():
        client = PipelinedRedis.from_url(URL)
        key = f"{prefix}:n"
        counts = await asyncio.gather(*(client.execute("INCR", key) for _ in range(50)))
        assert await client.set(f"{prefix}:v", b"a\r\nb", px=5000)
        value = await client.get(f"{prefix}:v")
        with pytest.raises(NoScriptError):
            await client.evalsha("0" * 40, 0)
        with pytest.raises(ResponseError):
            await client.execute("NOT-A-COMMAND")
        still = await client.ping()  # an error reply does not spoil the connection
        await client.aclose()
        return counts, value, still
    counts, value, still = asyncio.run(scenario())
    assert counts == list(range(1, 51)) and value == b"a\r\nb" and still


def test_unreachable_and_unanswering_redis_fail_fast():
    async def scenario():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            dead = sock.getsockname()[1]
        client = PipelinedRedis(port=dead)
        with pytest.raises(RedisConnectionError):
            await client.ping()
        with pytest.raises(RedisConnectionError):  # within the retry pause: no new connect attempt
            await client.ping()
        await client.aclose()
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
        mute = PipelinedRedis(port=server.sockets[0].getsockname()[1], stale_after=0.2)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await mute.ping()
        hung = mute.send("PING")
        await asyncio.sleep(0.3)
        newer = mute.send("PING")  # the connection has answered nothing for too long: dropped
        with pytest.raises(RedisConnectionError):
            await hung
        newer.cancel()
        await mute.aclose()
        server.close()
    asyncio.run(scenario())


@needs_redis
@pytest.mark.parametrize("scripts_loaded", [False, True])
def test_200_concurrent_admissions_over_one_pipelined_connection_admit_exactly_50(prefix, scripts_loaded):
    async def scenario(limiter):
        if scripts_loaded:  # then they go to Redis together (ADMIT_TOGETHER), not one by one
            await limiter.admit(admission(tenant(requests_per_minute=50), tenant="warm-up"))
        decisions = await asyncio.gather(*(limiter.admit(admission(tenant(requests_per_minute=50)))
                                           for _ in range(200)))
        assert all(d.reservation is not None for d in decisions if d.allowed)
        return sum(d.allowed for d in decisions)
    assert run(scenario, prefix, window_seconds=SLOW_WINDOW) == 50


def _admit_in_process(args):
    prefix, n = args
    return run(lambda limiter: _admitted(limiter, n), prefix, window_seconds=SLOW_WINDOW)


async def _admitted(limiter, n):
    await limiter.admit(admission(tenant(requests_per_minute=50), tenant="warm-up"))  # scripts loaded: together
    decisions = await asyncio.gather(*(limiter.admit(admission(tenant(requests_per_minute=50))) for _ in range(n)))
    return sum(d.allowed for d in decisions)


@needs_redis
def test_two_processes_with_pipelined_clients_share_one_limit_exactly(prefix):
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        assert sum(pool.map(_admit_in_process, [(prefix, 100), (prefix, 100)])) == 50


@needs_redis
def test_settle_soon_frees_the_slot_before_the_next_admission(prefix):
    async def scenario(limiter):
        subjects = tenant(concurrent_requests=1, monthly_tokens=1000)
        admitted = []
        for _ in range(20):  # one slot, taken and handed back without waiting, 20 times in a row
            decision = await limiter.admit(admission(subjects, prompt=10, max_tokens=40))
            admitted.append(decision.allowed)
            limiter.settle_soon(decision.reservation, 25)
        await asyncio.sleep(0.1)
        after = await limiter.admit(admission(subjects, prompt=10, max_tokens=40))
        return admitted, after
    admitted, after = run(scenario, prefix)
    assert all(admitted)
    # 20 settled at 25 tokens each = 500 used, and this one reserves 50 of the remaining 500.
    assert after.allowed


@needs_redis
def test_settle_soon_charges_the_budget_and_credits_tokens_per_minute(prefix):
    async def scenario(limiter):
        subjects = tenant(tokens_per_minute=1000, monthly_tokens=1000)
        first = await limiter.admit(admission(subjects, prompt=100, max_tokens=500))
        limiter.settle_soon(first.reservation, 150)
        second = await limiter.admit(admission(subjects, prompt=100, max_tokens=500))
        third = await limiter.admit(admission(subjects, prompt=100, max_tokens=500))
        return second, third
    second, third = run(scenario, prefix)
    # 150 used + 600 reserved leaves 250 of the monthly 1000: the third (600) is refused by the budget.
    assert second.allowed and second.headers["x-ratelimit-remaining-tokens"] == "250"
    assert not third.allowed and third.refused.limit_kind == "monthly_tokens"


@needs_redis
def test_settle_soon_loads_a_flushed_script_again(prefix):
    async def scenario(limiter):
        subjects = tenant(concurrent_requests=1)
        held = await limiter.admit(admission(subjects))
        limiter._sha[SETTLE] = "0" * 40  # what Redis answers after a restart: NOSCRIPT
        limiter.settle_soon(held.reservation, 0)
        await asyncio.sleep(0.2)
        return await limiter.admit(admission(subjects))
    assert run(scenario, prefix).allowed


def test_unreachable_redis_answers_per_policy_over_the_pipelined_client():
    async def scenario():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            dead = sock.getsockname()[1]
        client = PipelinedRedis(port=dead)
        limiter = RateLimiter(client, LimiterConfig(prefix="sy:test:dead"))
        rate = await limiter.admit(admission(tenant(requests_per_minute=10)))
        strict = RateLimiter(client, LimiterConfig(prefix="sy:test:dead", rate_failure=FailurePolicy.FAIL_CLOSED))
        closed = await strict.admit(admission(tenant(requests_per_minute=10)))
        budget = await limiter.admit(admission(tenant(monthly_tokens=10)))
        await client.aclose()
        return rate, closed, budget
    rate, closed, budget = asyncio.run(scenario())
    assert rate.outcome == Outcome.ADMITTED and rate.reservation is None
    assert closed.outcome == budget.outcome == Outcome.LIMITER_UNAVAILABLE


def test_integer_arrays_parse_whole_and_anything_else_falls_back():
    data = bytearray(b"*4\r\n:1\r\n:-20\r\n:0\r\n:9007199254740993\r\n*2\r\n:1\r\n$2\r\nok\r\n*0\r\n")
    reply, end = parse_reply(data, 0)
    assert reply == [1, -20, 0, 9007199254740993]
    reply, end = parse_reply(data, end)
    assert reply == [1, b"ok"]
    assert parse_reply(data, end) == ([], len(data))
    for cut in range(1, 30):  # an integer array cut anywhere: incomplete, never a short answer
        with pytest.raises(Exception):  # noqa: B017  any error will do: never a value
            parse_reply(bytearray(data[:cut]), 0)


@needs_redis
def test_quiet_sends_keep_their_place_and_report_only_errors(prefix):
    async def scenario():
        client = PipelinedRedis.from_url(URL)
        errors = []
        client.send_quiet(encode_command(("SET", f"{prefix}:q", "1")), errors.append)
        client.send_quiet(encode_command(("INCR", f"{prefix}:q")))  # nobody listens
        client.send_quiet(encode_command(("EVALSHA", "0" * 40, 0)), errors.append)
        value = await client.get(f"{prefix}:q")  # sent after them: runs after them
        await client.aclose()
        return value, errors
    value, errors = asyncio.run(scenario())
    assert value == b"2" and len(errors) == 1 and isinstance(errors[0], NoScriptError)


def test_quiet_sends_hear_of_a_lost_connection():
    async def scenario():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        client = PipelinedRedis(port=server.sockets[0].getsockname()[1])
        errors = []
        client.send_quiet(b"*1\r\n$4\r\nPING\r\n", errors.append)
        await asyncio.sleep(0.05)
        await client.aclose()
        server.close()
        return errors
    errors = asyncio.run(scenario())
    assert len(errors) == 1 and isinstance(errors[0], RedisConnectionError)


def test_a_deadline_fails_the_command_in_time_and_later_ones_still_wait():
    async def scenario():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
        client = PipelinedRedis(port=server.sockets[0].getsockname()[1])
        loop = asyncio.get_running_loop()
        started = loop.time()
        short = client.send_packed(b"*1\r\n$4\r\nPING\r\n", started + 0.1)
        long = client.send_packed(b"*1\r\n$4\r\nPING\r\n", started + 0.3)
        shorter = client.send_packed(b"*1\r\n$4\r\nPING\r\n", started + 0.05)  # earlier than the armed timer
        with pytest.raises(TimeoutError):
            await shorter
        first = loop.time() - started
        with pytest.raises(TimeoutError):
            await short
        second = loop.time() - started
        assert not long.done()
        with pytest.raises(TimeoutError):
            await long
        third = loop.time() - started
        await client.aclose()
        server.close()
        return first, second, third
    first, second, third = asyncio.run(scenario())
    # Each fails no earlier than its own deadline (how much later depends on the machine's load).
    assert first >= 0.05 and second >= 0.1 and third >= 0.3


@needs_redis
def test_an_answer_before_the_deadline_is_kept(prefix):
    async def scenario():
        client = PipelinedRedis.from_url(URL)
        loop = asyncio.get_running_loop()
        replies = await asyncio.gather(*(client.send_packed(encode_command(("INCR", f"{prefix}:d")), loop.time() + 0.5)
                                         for _ in range(20)))
        await asyncio.sleep(0.6)  # the watchdog fires and finds nothing to fail
        await client.aclose()
        return replies
    assert asyncio.run(scenario()) == list(range(1, 21))


@pytest.mark.parametrize("script_known", [False, True])
def test_an_unanswering_redis_answers_per_policy_within_the_timeout(script_known):
    async def scenario():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
        client = PipelinedRedis(port=server.sockets[0].getsockname()[1])
        limiter = RateLimiter(client, LimiterConfig(prefix="sy:test:mute", timeout_seconds=0.1))
        if script_known:  # the usual request: one EVALSHA bounded by the client's deadline
            limiter._sha[ADMIT] = "0" * 40
        loop = asyncio.get_running_loop()
        started = loop.time()
        budget = await asyncio.wait_for(limiter.admit(admission(tenant(monthly_tokens=10))), 5)
        rate = await asyncio.wait_for(limiter.admit(admission(tenant(requests_per_minute=10))), 5)
        elapsed = loop.time() - started
        await client.aclose()
        server.close()
        return budget, rate, elapsed
    budget, rate, elapsed = asyncio.run(scenario())
    assert budget.outcome == Outcome.LIMITER_UNAVAILABLE
    assert rate.outcome == Outcome.ADMITTED and rate.reservation is None
    assert elapsed > 0.09  # two admissions that each waited for the limiter's 0.1 s; wait_for catches a hang


@needs_redis
def test_a_later_quiet_send_is_built_when_written_and_keeps_its_place(prefix):
    async def scenario():
        client = PipelinedRedis.from_url(URL)
        key = f"{prefix}:later"
        await client.ping()
        parts = [b"1"]
        client.send_quiet_later(lambda: encode_command(("SET", key, b"".join(parts))))
        read = client.send("GET", key)  # queued after it, so Redis runs the SET first
        parts.append(b"2")  # still joins: the command is built when the iteration's commands leave
        value = await read
        await client.aclose()
        return value
    assert asyncio.run(scenario()) == b"12"
