"""gateway.routing.pool_queues: one fair queue per set of deployments, sized from the engines usable now."""
from gateway.config.settings import GatewayConfig
from gateway.config.snapshot import Pool, Upstream
from gateway.metering.metrics import GatewayMetrics
from gateway.routing.balancer import Balancer
from gateway.routing.pool_queues import MAX_IDLE_QUEUES, PoolQueues


def pools_of(deployment_id: int, engines: int) -> tuple[Pool, ...]:
    upstreams = tuple(Upstream(deployment_id * 100 + i, f"http://127.0.0.1:{9000 + i}", deployment_id, 1, False)
                      for i in range(engines))
    return (Pool(deployment_id, 1, 1, "round_robin", True, upstreams, None),)


def make_queues() -> tuple[PoolQueues, Balancer]:
    metrics = GatewayMetrics()
    balancer = Balancer(metrics, eject_after=3)
    return PoolQueues(GatewayConfig(redis_url="redis://unused", queue_inflight_per_instance=4), metrics,
                      balancer), balancer


def test_capacity_follows_ejections_and_readmissions():
    queues, balancer = make_queues()
    pools = pools_of(1, 3)
    assert queues.queue_for(pools).capacity == 12
    for _ in range(3):
        balancer.failed(pools[0].upstreams[0], "connect")
    assert queues.queue_for(pools).capacity == 8
    balancer.readmit(pools[0].upstreams[0].instance_id)
    assert queues.queue_for(pools).capacity == 12


def test_a_new_snapshots_pools_of_the_same_deployments_share_the_queue():
    queues, _ = make_queues()
    first = queues.queue_for(pools_of(1, 2))
    assert queues.queue_for(pools_of(1, 2)) is first  # an equal but new tuple: same deployments
    grown = queues.queue_for(pools_of(1, 3))
    assert grown is first and grown.capacity == 12


def test_pruning_idle_queues_never_leaves_two_queues_for_one_deployment():
    queues, _ = make_queues()
    kept = pools_of(1, 1)
    old = queues.queue_for(kept)
    for deployment_id in range(2, MAX_IDLE_QUEUES + 3):  # enough shapes to prune the idle ones
        queues.queue_for(pools_of(deployment_id, 1))
    again = queues.queue_for(kept)
    assert again is queues.queue_for(pools_of(1, 1))
    assert old is again or old.active == 0  # a dropped queue was idle and is no longer handed out
