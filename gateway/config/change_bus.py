"""The change bus, gateway side: apply each committed change at once, reload only what it touched.

Subscribes to this install's channels (controlplane/change_bus.py publishes): on `changes`, numbered
messages naming the audited action; on `signals`, the engines' latest queue figures. A message in
sequence reloads only the snapshot sections its action touches (a key change also empties the key
cache, so a revocation takes effect on the next request); messages arriving together are applied in
one reload. A gap in the numbers, a reconnect or an action we do not know means a full reload. While
the bus is down the refresher falls back to polling its version marker (gateway/config/refresher.py).
Nothing here runs on the request path.
"""
from __future__ import annotations

import asyncio
import json
import logging

log = logging.getLogger("gateway.change_bus")
RECONNECT_SECONDS = 1.0
COALESCE_SECONDS = 0.01  # messages landing within this are applied by one reload
IGNORED = ("auth.", "audit.", "member.", "platform_admin.", "usage.gpu_price.")
SECTIONS_BY_ACTION = (("api_key.", {"keys"}), ("quota.", {"policies"}), ("tenant.", {"tenants"}),
                      ("fleet.", {"pools"}), ("model.", {"pools"}), ("model_version.", {"pools"}),
                      ("rollout.", {"pools"}))


def sections_for(action: str) -> set[str] | None:
    """The snapshot sections a change touches; empty: none; None: unknown (reload everything)."""
    if action.startswith(IGNORED):
        return set()
    for prefix, sections in SECTIONS_BY_ACTION:
        if action.startswith(prefix):
            return sections
    return None


class ChangeBus:
    """One subscription per gateway process; `run` keeps it alive."""

    def __init__(self, state, refresher, redis_url: str, install_id: str):
        from controlplane.change_bus import channels

        self.state, self.refresher, self.redis_url = state, refresher, redis_url
        self.seq_key, self.changes_channel, self.signals_channel = channels(install_id)
        self.last_seq = 0
        self.applied = 0
        self.gaps = 0

    async def run(self) -> None:
        while True:
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 — any failure: poll until we are back
                log.warning("change bus disconnected (%s); polling until it is back", error)
            self.refresher.bus_connected = False
            await asyncio.sleep(RECONNECT_SECONDS)

    async def _session(self) -> None:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(self.redis_url, socket_connect_timeout=2, health_check_interval=15)
        pubsub = client.pubsub()
        try:
            await pubsub.subscribe(self.changes_channel, self.signals_channel)
            # Subscribed first, then read where the sequence is and load everything: a change after
            # this number arrives as a message; one before it is in the reload.
            self.last_seq = int(await client.get(self.seq_key) or 0)
            await self.refresher.reload_everything()
            self.refresher.bus_connected = True
            log.info("change bus subscribed at change %d", self.last_seq)
            await self._listen(pubsub)
        finally:
            await pubsub.aclose()
            await client.aclose()

    async def _listen(self, pubsub) -> None:
        while True:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=30)
            if message is None:
                continue
            batch = [message]
            await asyncio.sleep(COALESCE_SECONDS)
            while (more := await pubsub.get_message(ignore_subscribe_messages=True, timeout=0)) is not None:
                batch.append(more)
            await self._apply(batch)

    async def _apply(self, batch: list[dict]) -> None:
        sections: set[str] | None = set()
        for message in batch:
            channel = message["channel"].decode() if isinstance(message["channel"], bytes) else message["channel"]
            if channel == self.signals_channel:
                self._signals(message["data"])
                continue
            seq, _, body = bytes(message["data"]).decode().partition(" ")
            if int(seq) <= self.last_seq:
                continue  # already in the reload that followed subscribing
            touched = sections_for(json.loads(body).get("action", "")) if int(seq) == self.last_seq + 1 else None
            if touched is None or sections is None:
                sections = None
            else:
                sections |= touched
            self.gaps += int(seq) != self.last_seq + 1
            self.last_seq = int(seq)
        await self._reload(sections)

    async def _reload(self, sections: set[str] | None) -> None:
        if sections is None:
            await self.refresher.reload_everything()
        elif sections:
            if "keys" in sections:
                self.state.keys.clear()
            if sections - {"keys"}:
                await self.refresher.refresh_sections(sections - {"keys"})
        self.applied += 1

    def _signals(self, data) -> None:
        try:
            figures = json.loads(data)
            self.state.balancer.engine_load = {
                int(instance): float(values.get("waiting", 0)) + float(values.get("running", 0))
                for instance, values in figures.items()}
        except (ValueError, TypeError, AttributeError) as error:
            log.warning("change bus: unreadable signals (%s)", error)
