"""Usage events kept on local disk: the spool while the database is away, and the dead letter.

Why files, not a Redis stream: the embedded install has no Redis, a gateway that lost its
database may well have lost Redis with it (same network, same host), and a file on the
gateway's own disk needs nothing else to be up. Every gateway process of one install shares one
spool directory (`SWITCHYARD_GATEWAY_USAGE_SPOOL_DIR`, default `var/usage-spool/`):

- Each process appends to a **segment** of its own, `segment-<pid>-<ns>.jsonl`, one JSON object per
  event (the usage columns by name), each append one `write()` followed by `fsync`. It holds an
  exclusive `flock` on its segment while it may still append to it; the lock dies with the process.
- A segment nobody holds a lock on is **free**: its writer closed it to replay it, shut down, or
  died. Any process of the install replays free segments (`claim`), locking each while it reads
  and writes it, and deletes it once every event in it is stored. A gateway restarted during an
  outage therefore replays what its previous run spooled, and a sibling worker replays a crashed
  worker's segments.
- Replaying is idempotent (the usage insert skips stored request ids), so a segment replayed twice
  — its replayer died before deleting it, or a second process opened it just before the delete —
  still counts each event once.
- Segments are created under a `tmp-` name, locked, then renamed, so no other process can claim a
  segment before its writer holds the lock.
- The spool is **bounded**: `SWITCHYARD_GATEWAY_USAGE_SPOOL_MAX_BYTES` over all segments (checked
  by every process before it appends, so the processes together may pass it by at most one batch
  each). Events that do not fit are lost, counted in `switchyard_gateway_usage_lost_total{reason}`
  and logged (docs/usage-and-cost.md says how to size it and what to alert on).

The **dead letter** (`dead-letter.jsonl` in the same directory, bounded by the same size) holds the
rare event the database refused even alone (a split batch's last row): the event, its request id and
the error's type, never dropped silently. `manage.py usage_spool --retry-dead-letter` retries them.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from gateway.metering.recorder import ROW_FIELDS

log = logging.getLogger("gateway.spool")
SEGMENT_PREFIX, SEGMENT_SUFFIX = "segment-", ".jsonl"
DEAD_LETTER_NAME = "dead-letter.jsonl"
SEGMENT_MAX_BYTES = 4 * 1024 * 1024
_OCCURRED_AT = "occurred_at"


def encode_events(events: list) -> bytes:
    """JSON lines of `as_row` rows or `as_event` dicts, by column name (readable, and replayable by a
    later version whose columns differ: `record_usage_batch` takes dicts with defaults for the rest)."""
    lines = []
    for event in events:
        values = event if isinstance(event, dict) else dict(zip(ROW_FIELDS, event))
        # ensure_ascii: NULs and lone surrogates travel as JSON escapes and decode back unchanged.
        lines.append(json.dumps(values, default=_json_value, separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode("ascii") if lines else b""


def _json_value(value):
    if isinstance(value, datetime):
        return value.isoformat()
    return repr(value)  # a value no database took (the dead letter keeps what it can show)


def decode_event(line: bytes) -> dict | None:
    """One spooled event as a dict for `record_usage_batch`; None for a torn last line (a crash mid-append)."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if not isinstance(event, dict) or "request_id" not in event:
        return None
    if isinstance(event.get(_OCCURRED_AT), str):
        event[_OCCURRED_AT] = datetime.fromisoformat(event[_OCCURRED_AT])
    return event


def _append(fd: int, data: bytes) -> None:
    """Write all of `data` and make it durable before returning (the caller then forgets the events)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class SpoolSize:
    """What the spool directory holds now, as one process sees it."""

    segments: int = 0
    bytes: int = 0


class UsageSpool:
    """One process's view of the shared spool directory. Blocking file I/O: call it in a thread."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int):
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self._fd: int | None = None  # our open, locked segment
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def append(self, events: list) -> int:
        """Spool as many of `events` as fit (in order); returns how many were written durably."""
        room = self.max_bytes - self.size().bytes
        data = encode_events(events)
        if len(data) > room:
            lines = data.splitlines(keepends=True)
            kept, used = 0, 0
            while kept < len(lines) and used + len(lines[kept]) <= room:
                used += len(lines[kept])
                kept += 1
            data = b"".join(lines[:kept])
        else:
            kept = len(events)
        if kept:
            _append(self._segment(), data)
        return kept

    def _segment(self) -> int:
        if self._fd is not None and os.fstat(self._fd).st_size >= SEGMENT_MAX_BYTES:
            self.release()  # bounded segments: each replays in bounded memory and time
        if self._fd is None:
            name = f"{os.getpid()}-{time.time_ns()}{SEGMENT_SUFFIX}"
            temporary = self.directory / f"tmp-{name}"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)  # before the name is visible to other processes
            os.rename(temporary, self.directory / f"{SEGMENT_PREFIX}{name}")
            _fsync_directory(self.directory)
            self._fd = fd
        return self._fd

    def release(self) -> None:
        """Stop appending to our segment and unlock it: it is free to be replayed (by us or another)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def size(self) -> SpoolSize:
        found = SpoolSize()
        for entry in self._segments():
            try:
                found.bytes += entry.stat().st_size
                found.segments += 1
            except FileNotFoundError:  # replayed by another process meanwhile
                pass
        return found

    def free_segments(self) -> list[Path]:
        """Spooled segments no process holds (a directory listing, then a lock probe each), oldest first."""
        free = []
        for entry in sorted(self._segments(own=False), key=lambda e: e.name):
            segment = self.claim(Path(entry.path))
            if segment is not None:
                segment.close()
                free.append(Path(entry.path))
        return free

    def claim(self, path: Path) -> "Segment | None":
        """The segment, locked by us until closed; None when its writer still holds it or it is gone."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # its writer is alive and may still append
            os.close(fd)
            return None
        return Segment(path, fd)

    def _segments(self, *, own: bool = True) -> list[os.DirEntry]:
        ours = os.fstat(self._fd).st_ino if self._fd is not None and not own else None
        with os.scandir(self.directory) as entries:
            return [e for e in entries if e.name.startswith(SEGMENT_PREFIX) and e.name.endswith(SEGMENT_SUFFIX)
                    and e.inode() != ours]


class Segment:
    """A claimed spool segment: read its events in batches, delete it once they are all stored."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self._fd: int | None = fd
        self._file = os.fdopen(os.dup(fd), "rb")
        self.torn = 0  # lines that did not decode (a crash in the middle of an append)

    def read(self, count: int) -> list[dict]:
        """The next `count` events (fewer at the end; [] once all were read)."""
        events: list[dict] = []
        while len(events) < count:
            line = self._file.readline()
            if not line:
                break
            event = decode_event(line)
            if event is None:
                self.torn += 1
            else:
                events.append(event)
        return events

    def delete(self) -> None:
        try:
            os.unlink(self.path)  # while still locked: nobody replays it again after this
        except FileNotFoundError:  # another process opened it before we deleted it, and replayed it too
            pass

    def close(self) -> None:
        if self._fd is not None:
            self._file.close()
            os.close(self._fd)  # unlocks it
            self._fd = None


class DeadLetter:
    """Events the database refused even one at a time, appended to one shared, bounded file."""

    def __init__(self, path: str | os.PathLike, max_bytes: int):
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)

    def set_aside(self, event, error: BaseException) -> bool:
        """Append the event with why it was refused; False when the file is full (the event is lost)."""
        line = json.dumps({"error": type(error).__name__, "event": json.loads(encode_events([event]))},
                          separators=(",", ":")).encode("ascii") + b"\n"
        if self.size() + len(line) > self.max_bytes:
            return False
        fd = self._open_current()
        try:
            _append(fd, line)  # O_APPEND: each line lands whole at the end, whichever process writes it
        finally:
            os.close(fd)
        return True

    def _open_current(self) -> int:
        """The dead letter, opened and locked; reopened if `take` moved it away meanwhile."""
        while True:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)

    def take(self) -> tuple[list[dict], list[Path]]:
        """Every set-aside event, moved out of the file new ones go to (`manage.py usage_spool
        --retry-dead-letter`): the events, and the taken files to delete once each is stored or set aside again.
        Files a crashed earlier take left behind are taken again."""
        if self.path.exists():
            os.rename(self.path, self.path.with_name(f"{self.path.stem}.{time.time_ns()}.taken"))
        taken = sorted(self.path.parent.glob(f"{self.path.stem}.*.taken"))
        events = []
        for path in taken:
            with open(path, "rb") as file:
                fcntl.flock(file, fcntl.LOCK_EX)  # an append that opened it before the rename is done
                for line in file:
                    kept = decode_event(json.dumps(json.loads(line)["event"]).encode()) if line.strip() else None
                    if kept is not None:
                        events.append(kept)
        return events, taken

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def count(self) -> int:
        """How many events the dead letter holds."""
        try:
            with open(self.path, "rb") as file:
                return sum(1 for line in file if line.strip())
        except FileNotFoundError:
            return 0
