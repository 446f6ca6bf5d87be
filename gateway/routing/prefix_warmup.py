"""Filling a newly routable engine's prefix cache with the recent prompt heads that will now go to it.

When a deployment's pool grows (a scale-up, a schedule window opening, a promoted warm instance, a
replaced engine), prefix affinity's hash ring moves about 1/n of the keys to the new engine. The
next request of each moved key would pay a whole prefill of its shared prefix there: in a coding
team's stand-up spike, that is the repository prompt of every developer whose key moved, on the
engines that were started for the spike.

So each gateway process remembers the leading text of the prefix keys it routed most recently
(`PrefixMemory`: memory only, bounded, never written anywhere), and when an engine joins a pool
that already had one (`PrefixWarmer.snapshot_installed`), sends that engine — straight, not
metered, `max_tokens` 1 — the remembered heads whose home it is on the new ring, most recent
first, one at a time, each within a timeout. A head carries the tenant's cache salt when the
engine is shared, exactly as the tenant's own requests do, so nothing crosses tenants: a tenant's
text goes only to an engine its own requests are routed to. A pool that was empty (a wake from
zero) is left alone: its first engine has a waiting request to serve, not prefixes to fill.
Several gateway processes each warm what they remember; a head already cached costs the engine
next to nothing.
"""
from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass

from gateway.routing.policies.hash_ring import HashRing
from gateway.routing.policies.keys import LEADING_ROLES, content_text
from gateway.routing.policies.prefix_affinity import DEFAULT_VNODES, ring_key

log = logging.getLogger("gateway.routing")

WARM_CHARS = 4096  # the head kept per key: a repository's system prompt and shared file headers
MEMORY_ENTRIES = 512  # heads kept per gateway process, all pools together (at most ~2 MB)
PATHS = {"completion": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass(frozen=True, slots=True)
class Head:
    """One remembered prompt head: enough to send the engine the same leading tokens."""

    tenant_id: str
    key: str  # the ring key's second half (prefix or affinity key)
    kind: str  # "completion" or "chat"
    body: dict  # model, prompt or leading messages (cut to WARM_CHARS), max_tokens 1
    cache_salt: str | None  # the tenant's, sent to shared engines only (as the tenant's requests are)


def warm_body(body: dict, kind: str, model: str) -> dict | None:
    """The request that fills the cache with `body`'s leading text (cut to WARM_CHARS); None if it has none.

    A chat's leading messages are those prefix affinity keys on (`chat_leading_text`): the system and developer
    ones and the first other one."""
    if kind == "chat":
        messages, room = [], WARM_CHARS
        for message in body.get("messages") or []:
            if room <= 0:
                break
            if not isinstance(message, dict):
                continue
            text = content_text(message.get("content"))
            messages.append({"role": message.get("role"), "content": text[:room]})
            room -= len(text)
            if message.get("role") not in LEADING_ROLES:
                break
        if not messages:
            return None
        head: dict = {"messages": messages}
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            return None
        head = {"prompt": prompt[:WARM_CHARS]}
    return {"model": model, **head, "max_tokens": 1, "temperature": 0, "stream": False}


class PrefixMemory:
    """The prompt heads this process routed most recently, per pool shape (least recently used dropped first)."""

    def __init__(self, size: int = MEMORY_ENTRIES) -> None:
        self._size = size
        self._heads: OrderedDict[tuple, Head] = OrderedDict()

    def remember(self, shape: tuple, tenant_id: str, key: str, kind: str, body: dict, cache_salt: str | None) -> None:
        """On the request path: a dict lookup for a known key; the head is cut only for a new one."""
        entry = (shape, tenant_id, key)
        heads = self._heads
        if entry in heads:
            heads.move_to_end(entry)
            return
        warm = warm_body(body, kind, str(body.get("model", "")))
        if warm is None:
            return
        heads[entry] = Head(tenant_id, key, kind, warm, cache_salt)
        if len(heads) > self._size:
            heads.popitem(last=False)

    def heads_for(self, shape: tuple) -> list[Head]:
        """The pool shape's heads, most recent first."""
        return [head for (found, _, _), head in reversed(self._heads.items()) if found == shape]

    def shapes(self) -> set[tuple]:
        return {shape for shape, _, _ in self._heads}

    def __len__(self) -> int:
        return len(self._heads)


def moved_to(heads: list[Head], members: list[str], newcomers: set[str]) -> dict[str, list[Head]]:
    """Per newcomer, the heads whose home on the ring of `members` it is (in the order given)."""
    ring = HashRing(sorted((member, 1.0) for member in members), DEFAULT_VNODES)
    found: dict[str, list[Head]] = {}
    for head in heads:
        home = next(ring.walk(ring_key(head.tenant_id, head.key)), None)
        if home in newcomers:
            found.setdefault(home, []).append(head)
    return found


class PrefixWarmer:
    """Watches the snapshots for engines joining a pool and sends them their heads in the background."""

    def __init__(self, client, *, per_engine: int, timeout: float, counter=None) -> None:
        self.memory = PrefixMemory()
        self._client = client
        self._counter = counter  # switchyard_gateway_prefix_warmups, by outcome
        self._per_engine = per_engine
        self._timeout = timeout
        self._tasks: set[asyncio.Task] = set()
        self.sent = 0  # warm-up requests the engines answered 200 (for tests and /metrics)

    @property
    def enabled(self) -> bool:
        return self._per_engine > 0

    @property
    def busy(self) -> bool:
        """Some engine's warm-up is still under way."""
        return bool(self._tasks)

    def snapshot_installed(self, old, new) -> None:
        """Start warming every engine that joined a pool which already had one (called on each swap)."""
        if not self.enabled or not len(self.memory):
            return
        engines_before, engines_now = _engines_by_deployment(old), _engines_by_deployment(new)
        for shape in self.memory.shapes():
            before = [u for deployment in shape for u in engines_before.get(deployment, ())]
            if not before:
                continue  # a new pool, or a wake from zero
            now = [u for deployment in shape for u in engines_now.get(deployment, ())]
            newcomers = {str(u.instance_id) for u in now} - {str(u.instance_id) for u in before}
            if not newcomers:
                continue
            by_id = {str(u.instance_id): u for u in now}
            for member, heads in moved_to(self.memory.heads_for(shape), list(by_id), newcomers).items():
                self._start(by_id[member], heads[: self._per_engine])

    def _start(self, upstream, heads: list[Head]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a snapshot swapped in outside the gateway's loop (a tool, a test): nothing to warm with
            return
        task = loop.create_task(self._warm(upstream, heads), name=f"prefix-warmup-{upstream.instance_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _warm(self, upstream, heads: list[Head]) -> None:
        from gateway.clients.engine import UpstreamError
        from gateway.pipeline.payload import upstream_body

        for head in heads:
            body = upstream_body(head.body, salt=head.cache_salt if upstream.shared else None, priority=None)
            try:
                async with asyncio.timeout(self._timeout):
                    response = await self._client.post(upstream.url + PATHS[head.kind], body,
                                                       ((b"content-type", b"application/json"),))
                    try:
                        await response.read()
                    finally:
                        response.close()
            except (UpstreamError, OSError, TimeoutError) as error:
                self._count("failed")
                log.info("prefix warm-up of instance %s stopped: %r", upstream.instance_id, error)
                return
            if response.status != 200:
                self._count("failed")
                log.info("prefix warm-up of instance %s stopped: status %s", upstream.instance_id, response.status)
                return
            self.sent += 1
            self._count("ok")

    def _count(self, outcome: str) -> None:
        if self._counter is not None:
            self._counter.labels(outcome).inc()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _engines_by_deployment(snapshot) -> dict[int, tuple]:
    """Each deployment's routable engines in a snapshot."""
    return {pool.deployment_id: pool.upstreams for pools in snapshot.pools.values() for pool in pools}
