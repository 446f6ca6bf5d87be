"""The API key format: `sy_<env>_<32 random base62><6 base62 CRC-32 checksum>`.

32 base62 characters from `secrets` carry ~190 bits. The checksum lets a typo be rejected
before any lookup; the HMAC (with a server-side pepper) is what is stored and compared.
"""
import functools
import hmac
import re
import secrets
import zlib

from django.conf import settings

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
BODY_LENGTH = 32
CHECKSUM_LENGTH = 6
PREFIX_BODY_CHARS = 8
KEY_PATTERN = re.compile(r"^sy_(live|test|dev)_([0-9A-Za-z]{32})([0-9A-Za-z]{6})$")


def _base62(number: int, width: int) -> str:
    digits = []
    for _ in range(width):
        number, remainder = divmod(number, 62)
        digits.append(ALPHABET[remainder])
    return "".join(reversed(digits))


def checksum(head: str) -> str:
    return _base62(zlib.crc32(head.encode()), CHECKSUM_LENGTH)


def generate_key(env: str | None = None) -> str:
    env = env or settings.SWITCHYARD_KEY_ENV
    body = "".join(secrets.choice(ALPHABET) for _ in range(BODY_LENGTH))
    head = f"sy_{env}_{body}"
    return head + checksum(head)


def is_well_formed(raw: str) -> bool:
    """Shape and checksum only: no database, no secret involved."""
    match = KEY_PATTERN.match(raw or "")
    if not match:
        return False
    head = raw[: -CHECKSUM_LENGTH]
    return hmac.compare_digest(checksum(head), match.group(3))


def display_prefix(raw: str) -> str:
    """The part of a key that may be shown, logged and audited (e.g. `sy_live_Ab3dEf9h`)."""
    match = KEY_PATTERN.match(raw)
    if match is None:
        raise ValueError("not an API key")
    env, body = match.group(1, 2)
    return f"sy_{env}_{body[:PREFIX_BODY_CHARS]}"


def hash_key(raw: str) -> str:
    """HMAC-SHA256 of the whole key with the pepper: what the database stores."""
    mac = _keyed(settings.SWITCHYARD_KEY_PEPPER).copy()
    mac.update(raw.encode())
    return mac.hexdigest()


@functools.lru_cache(maxsize=4)
def _keyed(pepper: str) -> hmac.HMAC:
    """The HMAC state after the pepper, copied per key: OpenSSL 3 looks the digest up and keys the
    MAC again on every one-shot call, which costs more than the hash itself (every gateway request
    hashes its key)."""
    return hmac.new(pepper.encode(), digestmod="sha256")
