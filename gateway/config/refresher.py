"""Keeping the snapshot current: changes arrive on the change bus; a cheap version marker is the backstop.

The change bus (`gateway.config.change_bus`) tells the refresher what changed, and it reloads only
those sections of the snapshot. Behind it, the refresher polls a cheap version marker — every
`backstop_seconds` while the bus is connected, every `interval` while it is not — and reloads
everything only when the marker moved without a message (a lost publish, a gap).

The ORM runs in the gateway's database threads (`gateway.clients.database`), never on the event loop. If
the database is unreachable the gateway keeps serving its last snapshot and keeps polling; one that
starts while the database is away serves 503s (`service_unavailable`) until its first snapshot loads.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Callable

from gateway import errors
from gateway.clients.database import database_unavailable
from gateway.config.snapshot_loader import SECTIONS, load_sections, load_snapshot, version_marker

if TYPE_CHECKING:
    from gateway.config.snapshot import Snapshot

log = logging.getLogger("gateway.refresher")
PROBE_EVERY_SECONDS = 1.0
ON_DEMAND_GAP_SECONDS = 0.05


async def load_current(db, default_user_rpm: int):
    """Read the marker, then the data: data is never older than the version it is stamped with."""
    version = await db.run(version_marker)
    return await db.run(load_snapshot, version, default_user_rpm)


class SnapshotRefresher:
    """Swaps `state.snapshot` and drops the key cache whenever the configuration changed."""

    def __init__(self, state, interval: float, backstop_seconds: float = 5.0):
        self.state = state
        self.interval = interval
        self.backstop_seconds = max(backstop_seconds, interval)
        self.bus_connected = False  # set by the change bus while it is subscribed and in sequence
        # Called with each new snapshot before requests see it.
        self.before_install: Callable[[Snapshot], None] | None = None
        self.loads = 0
        self.full_loads = 0
        self._last_probe = 0.0
        self._on_demand: asyncio.Future | None = None
        self._last_on_demand = 0.0
        self._failing = False

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.backstop_seconds if self.bus_connected else self.interval)
            try:
                await self.refresh_once()
            except Exception as error:
                self._refresh_failed(error)
            else:
                self._failing = False
            await self._probe_ejected()

    def _refresh_failed(self, error: Exception) -> None:
        if not database_unavailable(error):
            log.exception("snapshot refresh failed; serving the previous snapshot")
        elif not self._failing:  # once per outage, not every 0.3 s
            log.error("database unavailable (%s); serving the previous snapshot until it returns",
                      type(error).__name__)
        self._failing = True

    async def refresh_once(self) -> bool:
        """Reload if the marker moved; True when a new snapshot was swapped in."""
        state = self.state
        version = await state.db.run(version_marker)
        if version == state.snapshot.version:
            return False
        # A write landing between the marker read and the load is in the data but not the
        # marker, so the next poll reloads once more: harmless, and never the reverse.
        snapshot = await state.db.run(load_snapshot, version, state.config.default_user_rpm)
        self.install(snapshot)
        self.full_loads += 1
        return True

    async def refresh_sections(self, sections) -> None:
        """Reload only `sections` of the snapshot (what a change on the bus touched), stamped with the
        marker read first, so the backstop poll finds nothing left to reload."""
        state = self.state
        version = await state.db.run(version_marker)
        snapshot = await state.db.run(load_sections, state.snapshot, frozenset(sections) & SECTIONS, version)
        self.install(snapshot)

    async def reload_everything(self) -> None:
        """A full reload, whatever the marker says (the bus lost its place)."""
        state = self.state
        version = await state.db.run(version_marker)
        self.install(await state.db.run(load_snapshot, version, state.config.default_user_rpm))
        self.full_loads += 1

    async def refresh_now(self) -> bool:
        """Refresh at once, for a request that found something newer than the snapshot (a tenant
        created since the last poll). Concurrent callers share one refresh; after one, the next
        waits out `ON_DEMAND_GAP_SECONDS`, so keys of unknown tenants cannot hammer the database.

        With the database away the request cannot be decided (its tenant is unknown here, not
        known to be missing): `errors.database_unavailable()`, the 503 every request-path database
        touch answers (gateway/clients/database.py)."""
        if self._on_demand is None:
            self._on_demand = asyncio.ensure_future(self._refresh_on_demand())
        try:
            return await asyncio.shield(self._on_demand)
        except Exception as error:
            if database_unavailable(error):
                raise errors.database_unavailable() from error
            log.exception("on-demand snapshot refresh failed")
            return False  # the caller decides on the snapshot it has

    async def _refresh_on_demand(self) -> bool:
        try:
            wait = self._last_on_demand + ON_DEMAND_GAP_SECONDS - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            return await self.refresh_once()
        finally:
            self._last_on_demand = time.monotonic()
            self._on_demand = None

    def install(self, snapshot) -> None:
        """Swap the snapshot in and forget every cached key (revocations take effect here)."""
        state = self.state
        if self.before_install is not None:
            self.before_install(snapshot)
        previous, state.snapshot = state.snapshot, snapshot
        if state.warmer is not None:
            state.warmer.snapshot_installed(previous, snapshot)
        state.keys.clear()
        live = {u.instance_id for pools in snapshot.pools.values() for p in pools for u in p.upstreams}
        state.balancer.forget_missing(live)
        self.loads += 1
        state.metrics.snapshot_version.set(self.loads)

    async def _probe_ejected(self) -> None:
        state = self.state
        if not state.balancer.ejected or time.monotonic() - self._last_probe < PROBE_EVERY_SECONDS:
            return
        self._last_probe = time.monotonic()
        await state.balancer.probe_ejected(state.upstream, state.timeouts.connect)
