"""Failed sign-ins are counted per username and per source address, independently; past a limit, that
username or that address is locked for a while (docs/console.md, "Sign-in limits").

- A failure counts against the submitted username *and* the caller's address (an IPv6 address by its
  /64, which one client usually holds whole, so walking through it gains nothing).
- A success clears that username's counter only, never the address's: were it otherwise, one good
  account signed in between guesses would keep an address unlocked for ever (password spraying).
- A lock refuses every sign-in for the username (from anywhere) or from the address (for any
  username) without checking the password, with one message whether or not the username exists.
- Each lock is audited once (`auth.login_locked`); each failure is audited as `auth.login_failed`
  by Django's signal (audit/auth_events.py). Attempts refused during a lock are logged, not audited:
  one audit row per refused attempt would let anyone flood the append-only chain.

Counters and locks live in Django's cache (Redis when configured, so shared by every process).
"""
import hashlib
import ipaddress
import logging
import math
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

from controlplane.counters import count_in_window

logger = logging.getLogger(__name__)

USERNAME, ADDRESS = "username", "ip"
IPV6_BUCKET_PREFIX = 64


@dataclass(frozen=True)
class Subject:
    """What one counter counts: a username or an address bucket."""

    scope: str
    value: str

    @property
    def counter_key(self) -> str:
        return f"login-fail:{self.scope}:{self._digest}"

    @property
    def lock_key(self) -> str:
        return f"login-lock:{self.scope}:{self._digest}"

    @property
    def _digest(self) -> str:  # bounded, cache-safe keys whatever the username holds
        return hashlib.sha256(self.value.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    @property
    def limit(self) -> int:
        if self.scope == USERNAME:
            return settings.SWITCHYARD_LOGIN_FAILURES_PER_USERNAME
        return settings.SWITCHYARD_LOGIN_FAILURES_PER_IP


def normalized_username(username: str) -> str:
    return (username or "").strip().lower()[:150]


def address_bucket(ip: str | None) -> str:
    """The address a counter is kept for: IPv4 as is, IPv6 by its /64, unparsable ones verbatim."""
    if not ip:
        return "unknown"
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return ip[:64]
    if address.version == 6 and address.ipv4_mapped:
        return str(address.ipv4_mapped)
    if address.version == 6:
        return str(ipaddress.ip_network(f"{address}/{IPV6_BUCKET_PREFIX}", strict=False))
    return str(address)


def subjects(username: str, ip: str | None) -> list[Subject]:
    name = normalized_username(username)
    address = Subject(ADDRESS, address_bucket(ip))
    return [Subject(USERNAME, name), address] if name else [address]


def is_locked(username: str, ip: str | None) -> bool:
    """True while the username or the address is locked; the refusal is logged (not audited)."""
    locked = [s.scope for s in subjects(username, ip) if cache.get(s.lock_key)]
    if locked:
        logger.warning("sign-in refused: locked", extra={"lock_scopes": locked, "address": address_bucket(ip)})
    return bool(locked)


def record_failure(username: str, ip: str | None) -> None:
    """Count a failed sign-in against the username and the address; lock whichever reached its limit."""
    for subject in subjects(username, ip):
        failures = count_in_window(subject.counter_key, settings.SWITCHYARD_LOGIN_WINDOW_SECONDS)
        if failures >= subject.limit:
            _lock(subject, failures, username)


def record_success(username: str) -> None:
    """A correct password clears the username's failures — never the address's (see the module docstring)."""
    name = normalized_username(username)
    if name:
        cache.delete(Subject(USERNAME, name).counter_key)


def unlock(*, username: str | None = None, ip: str | None = None) -> list[str]:
    """Lift a lock and its counter now (operators: `manage.py login_unlock`); the scopes found locked."""
    found = []
    targets = ([Subject(USERNAME, normalized_username(username))] if username else []) + \
              ([Subject(ADDRESS, address_bucket(ip))] if ip else [])
    for subject in targets:
        if cache.get(subject.lock_key):
            found.append(subject.scope)
        cache.delete_many([subject.lock_key, subject.counter_key])
    return found


def lock_minutes() -> int:
    return max(1, math.ceil(settings.SWITCHYARD_LOGIN_LOCK_SECONDS / 60))


def _lock(subject: Subject, failures: int, username: str) -> None:
    lock_seconds = settings.SWITCHYARD_LOGIN_LOCK_SECONDS
    if not cache.add(subject.lock_key, 1, lock_seconds):
        return  # already locked (a concurrent failure got there first): audited once
    cache.delete(subject.counter_key)  # after the lock, the subject starts from zero
    _audit_lock(subject, failures, username, lock_seconds)


def _audit_lock(subject: Subject, failures: int, username: str, lock_seconds: int) -> None:
    from audit.actor import Actor
    from audit.services import record_event

    after = {"scope": subject.scope, "failures": failures, "lock_seconds": lock_seconds,
             ("username" if subject.scope == USERNAME else "address"): subject.value}
    record_event(actor=Actor.anonymous(normalized_username(username) or "anonymous"), action="auth.login_locked",
                 after=after)

