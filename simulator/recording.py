"""`--record-requests FILE`: every generation request the engine received, appended as it came.

For tests that must see what reached the engine (the redaction canary): the head line is JSON
(path, headers, body length), then the body's bytes exactly as received, then a newline.
"""
from __future__ import annotations

import json
from pathlib import Path


class RequestRecorder:
    """Appends one record per request to a file (unbuffered: readable while the engine runs)."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "ab", buffering=0)

    def record(self, scope: dict, body: bytes) -> None:
        head = {"path": scope["path"], "bytes": len(body),
                "headers": [[name.decode("latin-1"), value.decode("latin-1")] for name, value in scope["headers"]]}
        self._file.write(json.dumps(head).encode() + b"\n" + body + b"\n")


def read_requests(path: str | Path) -> list[tuple[dict, bytes]]:
    """The (head, body) records of a file written by RequestRecorder."""
    data, records, pos = Path(path).read_bytes(), [], 0
    while pos < len(data):
        end = data.index(b"\n", pos)
        head = json.loads(data[pos:end])
        start = end + 1
        records.append((head, data[start:start + head["bytes"]]))
        pos = start + head["bytes"] + 1
    return records
