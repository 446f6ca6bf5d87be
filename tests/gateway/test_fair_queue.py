"""The fair queue without HTTP: tenants take turns, interactive first, bounded waiting."""
import asyncio

import pytest

from gateway.routing.fair_queue import FairQueue, QueueFull, QueueLimits, QueueTimeout


async def admission_order(queue: FairQueue, arrivals: list[tuple[str, bool]]) -> list[str]:
    """Hold the only slot, queue `arrivals` in order, then free it; who got in, in order."""
    order: list[str] = []
    held = await queue.enter("holder")

    async def request(tenant: str, batch: bool, label: str) -> None:
        async with queue.slot(tenant, batch):
            order.append(label)
            await asyncio.sleep(0)

    tasks = [asyncio.create_task(request(t, b, f"{t}{'-batch' if b else ''}")) for t, b in arrivals]
    await asyncio.sleep(0)  # every request is waiting now
    assert held == 0.0 and queue.waiting == len(arrivals)
    queue.leave()
    await asyncio.gather(*tasks)
    return order


def test_a_flooding_tenant_does_not_push_the_other_to_the_back():
    arrivals = [("A", False)] * 50 + [("B", False)] * 5
    order = asyncio.run(admission_order(FairQueue(1), arrivals))
    assert len(order) == 55
    b_places = [i for i, who in enumerate(order) if who == "B"]
    # Turns alternate: B's five go in among A's first ones, not after all 50.
    assert b_places == [1, 3, 5, 7, 9]


def test_interactive_goes_before_batch_within_a_tenant():
    arrivals = [("A", True)] * 3 + [("A", False)] * 2
    order = asyncio.run(admission_order(FairQueue(1), arrivals))
    assert order == ["A", "A", "A-batch", "A-batch", "A-batch"]


def test_batch_of_one_tenant_still_gets_turns_against_another_tenants_interactive():
    arrivals = [("A", True)] * 3 + [("B", False)] * 3
    order = asyncio.run(admission_order(FairQueue(1), arrivals))
    assert order == ["A-batch", "B", "A-batch", "B", "A-batch", "B"]


def test_free_slots_are_taken_without_waiting():
    async def main():
        queue = FairQueue(2)
        assert await queue.enter("A") == 0.0 and await queue.enter("B") == 0.0
        assert queue.saturated and not queue.try_enter()
        queue.leave()
        assert queue.try_enter()

    asyncio.run(main())


def test_full_queues_refuse_newcomers():
    async def main():
        queue = FairQueue(1, QueueLimits(max_total=3, max_per_tenant=2, max_wait=5))
        await queue.enter("holder")
        waiting = [asyncio.create_task(queue.enter(t)) for t in ("A", "A", "B")]
        await asyncio.sleep(0)
        with pytest.raises(QueueFull) as tenant_full:
            await queue.enter("A")
        with pytest.raises(QueueFull) as pool_full:
            await queue.enter("C")
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        return tenant_full.value.scope, pool_full.value.scope, queue.waiting

    assert asyncio.run(main()) == ("tenant", "pool", 0)


def test_a_waiter_gives_up_after_max_wait_and_leaves_the_queue():
    async def main():
        depths = []
        queue = FairQueue(1, QueueLimits(max_wait=0.05), on_depth=lambda tenant, delta: depths.append(delta))
        await queue.enter("holder")
        with pytest.raises(QueueTimeout):
            await queue.enter("A")
        return queue.waiting, queue.depth("A"), sum(depths), queue.active

    assert asyncio.run(main()) == (0, 0, 0, 1)


def test_a_cancelled_waiter_never_takes_a_slot():
    async def main():
        queue = FairQueue(1)
        await queue.enter("holder")
        gone = asyncio.create_task(queue.enter("A"))
        stays = asyncio.create_task(queue.enter("B"))
        await asyncio.sleep(0)
        gone.cancel()
        queue.leave()  # the slot must reach B, not the cancelled A
        await stays
        await asyncio.gather(gone, return_exceptions=True)
        return queue.active, queue.waiting

    assert asyncio.run(main()) == (1, 0)


def test_growing_capacity_admits_waiters():
    async def main():
        queue = FairQueue(0)
        waiting = [asyncio.create_task(queue.enter(t)) for t in ("A", "B", "C")]
        await asyncio.sleep(0)
        queue.resize(2)
        await asyncio.sleep(0)
        done = sum(task.done() for task in waiting)
        queue.resize(3)
        await asyncio.gather(*waiting)
        return done, queue.active

    assert asyncio.run(main()) == (2, 3)


async def flow_order(queue: FairQueue, arrivals: list[tuple[str, str]]) -> list[str]:
    """Like `admission_order`, with (tenant, flow) arrivals; labels are the flows."""
    order: list[str] = []
    await queue.enter("holder")

    async def request(tenant: str, flow: str) -> None:
        async with queue.slot(tenant, False, flow):
            order.append(flow)
            await asyncio.sleep(0)

    tasks = [asyncio.create_task(request(t, f)) for t, f in arrivals]
    await asyncio.sleep(0)
    queue.leave()
    await asyncio.gather(*tasks)
    return order


def test_a_runaway_agent_session_does_not_starve_its_own_tenants_ide_users():
    # One agent session queues 40 requests, then two developers of the same tenant one each.
    arrivals = [("acme", "agent")] * 40 + [("acme", "ide-1"), ("acme", "ide-2")]
    order = asyncio.run(flow_order(FairQueue(1), arrivals))
    assert order.index("ide-1") <= 2 and order.index("ide-2") <= 4, order[:6]


def test_flows_take_turns_within_a_tenant_and_tenants_still_take_turns():
    arrivals = [("acme", "agent")] * 4 + [("acme", "ide")] * 2 + [("beta", "b")] * 2
    order = asyncio.run(flow_order(FairQueue(1), arrivals))
    # Tenants alternate (acme, beta, acme, beta, …); within acme the agent and the IDE alternate.
    assert order == ["agent", "b", "ide", "b", "agent", "ide", "agent", "agent"]


def test_the_shared_state_grants_a_chosen_tenant_its_next_flow_in_turn():
    async def main():
        queue = FairQueue(1)
        await queue.enter("holder")
        tasks = [asyncio.create_task(queue.enter(t, False, f)) for t, f in
                 [("a", "x"), ("a", "x"), ("a", "y"), ("b", "z")]]
        await asyncio.sleep(0)
        granted = [queue.grant("a"), queue.grant("a"), queue.grant("c")]
        await asyncio.sleep(0)
        done = [task.done() for task in tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return granted, done

    # "a" gets two slots out of turn: its flows x then y (not x twice); "c" has nobody waiting.
    assert asyncio.run(main()) == ([True, True, False], [True, False, True, False])
