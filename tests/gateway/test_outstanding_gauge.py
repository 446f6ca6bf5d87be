"""The per-engine outstanding-requests gauge reads the balancer's counts when scraped."""
from gateway.config.snapshot import Upstream
from gateway.metering.metrics import GatewayMetrics
from gateway.routing.balancer import Balancer


def gauge(metrics: GatewayMetrics, instance_id: int) -> float | None:
    for line in metrics.render().decode().splitlines():
        if line.startswith(f'switchyard_gateway_outstanding_requests{{instance="{instance_id}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_the_gauge_follows_acquire_and_release_and_goes_with_the_engine():
    metrics = GatewayMetrics()
    balancer = Balancer(metrics, eject_after=3)
    one, two = (Upstream(i, f"http://127.0.0.1:{9000 + i}", 1, 1, False) for i in (1, 2))
    assert gauge(metrics, 1) is None
    balancer.acquire(one)
    balancer.acquire(one)
    balancer.acquire(two)
    assert (gauge(metrics, 1), gauge(metrics, 2)) == (2, 1)
    balancer.release(one)
    balancer.release(two)
    balancer.release(two)  # never below zero
    assert (gauge(metrics, 1), gauge(metrics, 2)) == (1, 0)
    balancer.forget_missing({1})  # engine 2 left the snapshot with nothing in flight
    assert gauge(metrics, 1) == 1 and gauge(metrics, 2) is None
    balancer.acquire(two)  # it came back
    assert gauge(metrics, 2) == 1
