"""The ASGI lifespan protocol: start-up before serving, shutdown after."""
from __future__ import annotations

import asyncio
import logging

from gateway.server.wire import ASGI

log = logging.getLogger("gateway.server")


class Lifespan:
    """The ASGI lifespan protocol: startup before serving, shutdown after."""

    def __init__(self, app):
        self.app = app
        self._inbox: asyncio.Queue = None  # made by startup(), before any use
        self._outbox: asyncio.Queue = None
        self._task: asyncio.Task | None = None

    async def startup(self) -> bool:
        self._inbox, self._outbox = asyncio.Queue(), asyncio.Queue()
        self._task = asyncio.create_task(self._main())
        await self._inbox.put({"type": "lifespan.startup"})
        message = await self._outbox.get()
        if message["type"] == "lifespan.startup.failed":
            log.error("application start-up failed: %s", message.get("message", ""))
            return False
        return True

    async def shutdown(self) -> None:
        if self._task is None or self._task.done():
            return
        await self._inbox.put({"type": "lifespan.shutdown"})
        try:
            await asyncio.wait_for(self._outbox.get(), 60)
        except TimeoutError:
            log.error("application shutdown did not finish within 60 s")

    async def _main(self) -> None:
        scope = {"type": "lifespan", "asgi": ASGI, "state": {}}
        sent: set[str] = set()

        async def send(message: dict) -> None:
            sent.add(message["type"])
            await self._outbox.put(message)

        try:
            await self.app(scope, self._inbox.get, send)
        except BaseException as error:  # a crash in start-up or shutdown
            if isinstance(error, asyncio.CancelledError):
                raise
            log.exception("the application's lifespan failed")
            if not sent:
                await self._outbox.put({"type": "lifespan.startup.failed", "message": repr(error)})
        # An application that ignores lifespan messages (or returned early) must not hang the server.
        for kind in ("lifespan.startup.complete", "lifespan.shutdown.complete"):
            if not sent & {kind, kind.replace("complete", "failed")}:
                await self._outbox.put({"type": kind})
