"""uvicorn's httptools protocol with corked writes: what a response writes in one event-loop
iteration leaves in one `send`.

uvicorn writes a response's status line and headers, then its body, as two `transport.write`
calls, so a small JSON answer costs two sends. On loopback and virtual NICs each send also runs
the receiving side's TCP processing and wake-up, which made the header write the single most
expensive line in both the gateway's and the simulator's profiles. Writes are collected and
flushed by a callback at the end of the current loop iteration: a whole answer goes as one
segment, and SSE chunks, written in separate iterations, still leave as soon as they are made.

Use: `uvicorn.run(app, http=CorkedHttpToolsProtocol, ...)`.
"""
from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CorkedTransport:
    """Delegates to a transport; `write` defers to the end of the loop iteration."""

    __slots__ = ("_transport", "_loop", "_pending", "_scheduled")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._scheduled = False

    def write(self, data: bytes) -> None:
        if not data:
            return
        self._pending.append(data)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def writelines(self, lines) -> None:
        for data in lines:
            self.write(data)

    def _flush(self) -> None:
        self._scheduled = False
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self._flush()  # what was written before close() still goes out
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class CorkedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol whose responses are written through a `CorkedTransport`.

    As a `--workers` worker it also keeps its share of connections (gateway.balance)."""

    share = None  # a gateway.balance.ConnectionShare, set once per worker process
    _shed = False

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(CorkedTransport(transport, self.loop))
        if self.share is not None:
            self.share.opened()

    def connection_lost(self, exc) -> None:
        super().connection_lost(exc)
        if self.share is not None:
            self.share.closed(self._shed)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        if self.share is not None and not self._shed and self.cycle.keep_alive and self.share.should_shed():
            self._shed = True
            self.cycle.keep_alive = False  # answered in full, then closed: the client reconnects
