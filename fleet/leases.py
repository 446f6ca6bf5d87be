"""Overlap guards for periodic fleet work: a lease row taken by one conditional UPDATE.

Celery beat sends a task every interval whether or not the previous run finished; a health pass
over a large fleet can outlast a 5 s schedule, and two passes at once would probe and fail the
same instances twice. The lease expires by itself, so a worker killed mid-pass blocks the next
one for at most `ttl`.
"""
import secrets
from contextlib import contextmanager
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from fleet.models import Lease


@contextmanager
def held(name: str, ttl: float):
    """Yield True while we hold lease `name` (for at most `ttl` seconds), False if another holder has it."""
    token = secrets.token_hex(16)
    now = timezone.now()
    _ensure_row(name, now)
    taken = Lease.objects.filter(name=name, expires_at__lte=now).update(
        holder=token, expires_at=now + timedelta(seconds=ttl))
    try:
        yield bool(taken)
    finally:
        if taken:
            Lease.objects.filter(name=name, holder=token).update(holder="", expires_at=timezone.now())


def _ensure_row(name: str, now) -> None:
    if Lease.objects.filter(name=name).exists():
        return
    try:
        with transaction.atomic():
            Lease.objects.create(name=name, expires_at=now - timedelta(seconds=1))
    except IntegrityError:  # another worker created it first
        pass
