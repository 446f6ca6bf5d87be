"""Corked writes: one send per event-loop iteration, nothing lost or reordered, flushed on close."""
import asyncio

from gateway.corked import CorkedTransport


class RecordingTransport:
    """Stands in for the socket transport under the component being tested (the cork)."""

    def __init__(self):
        self.sent, self.closed = [], False

    def write(self, data):
        self.sent.append(data)

    def is_closing(self):
        return self.closed

    def close(self):
        self.closed = True

    def get_extra_info(self, name):
        return ("127.0.0.1", 1) if name == "peername" else None


def test_writes_of_one_iteration_leave_together_and_later_ones_separately():
    async def scenario():
        raw = RecordingTransport()
        corked = CorkedTransport(raw, asyncio.get_running_loop())
        corked.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        corked.write(b"")
        corked.write(b"{}")
        assert raw.sent == []  # not yet: the iteration is not over
        await asyncio.sleep(0)
        assert raw.sent == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
        corked.write(b"data: 1\n\n")
        await asyncio.sleep(0)
        corked.writelines([b"data: 2\n\n", b"data: [DONE]\n\n"])
        await asyncio.sleep(0)
        assert raw.sent[1:] == [b"data: 1\n\n", b"data: 2\n\ndata: [DONE]\n\n"]
        assert corked.get_extra_info("peername") == ("127.0.0.1", 1)  # the rest is delegated
    asyncio.run(scenario())


def test_close_flushes_first_and_nothing_is_written_after_it():
    async def scenario():
        raw = RecordingTransport()
        corked = CorkedTransport(raw, asyncio.get_running_loop())
        corked.write(b"last words")
        corked.close()
        assert raw.sent == [b"last words"] and raw.closed
        corked.write(b"too late")
        await asyncio.sleep(0)
        assert raw.sent == [b"last words"]
    asyncio.run(scenario())
