"""Which model version a request goes to while a rollout splits a deployment's traffic (docs/rollouts.md).

A pool in a rollout carries `version_weights`, the new version first. A request draws a point in
[0, 1) and takes the version whose share covers it: at random, or — when the request names a sticky
key (session header, OpenAI `user`, or its API key, as the rollout says) — from a hash of that key,
so one developer stays on one version. As the new version's weight grows its band [0, w) only
widens: a sticky caller already on it stays, and others join, never flip back and forth.
"""
from __future__ import annotations

import hashlib

from gateway.config.snapshot import Pool

SESSION_HEADER = b"x-switchyard-session"
SPAN = float(1 << 64)


def split_pool(pools: tuple[Pool, ...]) -> Pool | None:
    """The first pool whose traffic a rollout splits, if any (the hot path's only cost without one)."""
    for pool in pools:
        if pool.version_weights:
            return pool
    return None


def sticky_point(deployment_id: int, key: str) -> float:
    """A stable point in [0, 1) for a sticky key (per deployment, so rollouts of two pools are independent)."""
    digest = hashlib.blake2b(f"{deployment_id}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / SPAN


def version_at(weights: tuple[tuple[int, float], ...], point: float) -> int:
    """The version whose band covers `point` (bands in order; past the last band: the last weighted one)."""
    edge = 0.0
    for version, weight in weights:
        edge += max(0.0, weight)
        if point < edge:
            return version
    return next((v for v, w in reversed(weights) if w > 0), weights[-1][0])


def pick_version(pools: tuple[Pool, ...], sticky_key: str | None, draw: float) -> tuple[int, int] | None:
    """(deployment id, version id) for this request, or None when no pool's traffic is split."""
    pool = split_pool(pools)
    if pool is None:
        return None
    point = sticky_point(pool.deployment_id, sticky_key) if sticky_key else draw
    return pool.deployment_id, version_at(pool.version_weights, point)


def sticky_key(mode: str, session: bytes | None, user, key_id: int) -> str | None:
    """What keeps this caller on one version under the rollout's sticky mode (None: drawn per request)."""
    if mode == "api_key":
        return f"key:{key_id}"
    if mode == "session":
        if session:
            return "session:" + session.decode("latin-1")
        if isinstance(user, str) and user:
            return "user:" + user
    return None
