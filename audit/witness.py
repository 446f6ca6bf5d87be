"""An optional witness outside the database: every signed chain head is also sent somewhere else.

A file (`SWITCHYARD_AUDIT_WITNESS_FILE`, append-only JSON Lines) and/or an HTTP endpoint
(`SWITCHYARD_AUDIT_WITNESS_URL`, one POST per head). Someone who rolls the database back cannot
take back what the witness already saw: `audit_verify --witness FILE` then finds the database behind
or diverged. Writes happen in a Celery task queued on commit, so an admin request never waits on a
slow disk or an unreachable witness.
"""
import json
import os
from dataclasses import dataclass
from functools import partial

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.chain import format_time


@dataclass(frozen=True)
class SignedHead:
    """The chain head as the witness records it: enough to check it needs the signing key."""

    seq: int
    hash: str
    signature: str

    def entry(self) -> dict:
        return {"seq": self.seq, "hash": self.hash, "signature": self.signature,
                "witnessed_at": format_time(timezone.now())}


def targets() -> list[str]:
    """The configured witnesses: "file", "url", both or none."""
    return [name for name, value in (("file", settings.SWITCHYARD_AUDIT_WITNESS_FILE),
                                     ("url", settings.SWITCHYARD_AUDIT_WITNESS_URL)) if value]


def witness_on_commit(head: SignedHead) -> None:
    """Queue one witness task per target once the caller's transaction commits (never if it rolls back)."""
    for target in targets():
        # robust: a broker that is down must not turn a committed admin write into an error.
        transaction.on_commit(partial(_enqueue, head, target), robust=True)


def _enqueue(head: SignedHead, target: str) -> None:
    from audit.tasks import witness_head_task

    witness_head_task.delay(head.seq, head.hash, head.signature, target)


def send(head: SignedHead, target: str) -> None:
    """Deliver one head to one target; raises OSError / httpx.HTTPError so the task retries."""
    if target == "file":
        append_line(settings.SWITCHYARD_AUDIT_WITNESS_FILE, head.entry())
    elif target == "url" and settings.SWITCHYARD_AUDIT_WITNESS_URL:
        response = httpx.post(settings.SWITCHYARD_AUDIT_WITNESS_URL, json=head.entry(),
                              timeout=settings.SWITCHYARD_AUDIT_WITNESS_TIMEOUT_SECONDS)
        response.raise_for_status()
    else:
        raise ValueError(f"unknown witness target {target!r}")


def append_line(path, entry: dict) -> None:
    """One write() of one whole line with O_APPEND, then fsync: concurrent workers never interleave."""
    line = (json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def last_entry(path) -> dict | None:
    """The newest line of a witness file (read from its end), or None when there is none yet."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 4096))
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return None
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
