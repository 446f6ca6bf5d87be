"""Finding a secret, or a piece of one, wherever text may have kept it (tests only)."""
from __future__ import annotations

import json
from typing import Any, Iterable, Iterator

CORE = 12  # a slice this long from a random secret's middle occurs nowhere by chance


def needles(secret: str) -> set[str]:
    """The secret itself, JSON-escaped, each long line of it (a key's base64), and its middle."""
    found = {secret, json.dumps(secret)[1:-1]}
    found.update(line for line in secret.splitlines() if len(line) >= 24)
    if len(secret) >= CORE + 4:
        middle = len(secret) // 2
        found.add(secret[middle - CORE // 2: middle + CORE // 2])
    return found


def leaked(secrets: Iterable[str], text: str) -> list[str]:
    """The secrets of which some piece occurs in text."""
    return [secret for secret in secrets if any(needle in text for needle in needles(secret))]


def strings_of(value: Any) -> Iterator[str]:
    """Every string in a JSON value, object keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings_of(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_of(item)


def leaked_in_value(secrets: Iterable[str], value: Any) -> list[str]:
    return leaked(secrets, "\x00".join(strings_of(value)))
