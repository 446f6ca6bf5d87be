"""Affinity keys from request bodies: the prompt's leading blocks, hashed."""
from __future__ import annotations

import hashlib
import json
from typing import Any

AFFINITY_HEADER = "x-switchyard-affinity"  # e.g. "acme/api:src/billing/invoice.py"
DEFAULT_BLOCK_CHARS = 512
DEFAULT_MAX_BLOCKS = 4
LEADING_ROLES = ("system", "developer")


_EMPTY_HASH = hashlib.blake2b(digest_size=12)  # copied for each key


def _digest(text: str) -> str:
    digest = _EMPTY_HASH.copy()
    digest.update(text.encode())
    return digest.hexdigest()


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def chat_leading_text(messages: list, limit: int | None = None) -> str:
    """System / developer messages plus the first other message: stable across turns.

    With a limit, only the first `limit` characters (the rest would be cut off anyway).
    """
    pieces, size = [], 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        piece = f"{message.get('role')}\x1f{content_text(message.get('content'))}\x1e"
        pieces.append(piece)
        size += len(piece)
        if message.get("role") not in LEADING_ROLES or (limit is not None and size >= limit):
            break
    return "".join(pieces)[:limit]


def completion_leading_text(prompt: Any, block_chars: int, max_blocks: int) -> str:
    """The prompt's first whole blocks (what a prefix cache can hit), or all of a short one."""
    if isinstance(prompt, list):
        prompt = prompt[0] if prompt and isinstance(prompt[0], str) else json.dumps(prompt[:64])
    if not isinstance(prompt, str):
        return ""
    head = prompt[: block_chars * max_blocks]
    whole = len(head) // block_chars * block_chars
    return head[:whole] if whole else head


def prefix_key(body: dict, kind: str, block_chars: int = DEFAULT_BLOCK_CHARS,
               max_blocks: int = DEFAULT_MAX_BLOCKS) -> str | None:
    """A short hash of the request's leading text; kind is "chat" or "completion"."""
    if kind == "chat":
        text = chat_leading_text(body.get("messages") or [], block_chars * max_blocks)
    else:
        text = completion_leading_text(body.get("prompt"), block_chars, max_blocks)
    return _digest(text) if text else None
