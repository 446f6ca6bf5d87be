"""Fake endpoints for policy tests."""
from gateway.routing.policies import Endpoint, RouteRequest

REQUEST = RouteRequest(tenant_id="tenant-a", model="qwen-coder")


def pool(n, **fields):
    return [Endpoint(id=f"e{i}", url=f"http://10.0.0.{i}:8000", **fields) for i in range(n)]


def pick_many(policy, endpoints, n, request=REQUEST):
    return [policy.choose(endpoints, request).id for _ in range(n)]
