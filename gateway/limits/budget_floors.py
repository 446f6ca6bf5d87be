"""What the usage records say each budgeted subject spent this month: its budget's floor.

Redis holds the budgets' running counts, but Redis can lose them (a restart without persistence,
a failover, an eviction) and a settle can be lost. The usage records cannot: so every budget with
a monthly token budget counts at least what they say (`Limits.monthly_tokens_floor`), and a
budget hash that is missing starts from it (gateway/limits/scripts.py). The gateway reloads
the floors every `REFRESH_SECONDS` in a database thread, off the request path. Sync ORM code.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Mapping

from gateway.limits.admission import month_bounds

REFRESH_SECONDS = 15.0  # the floors lag the records by at most this (plus the usage writer's flush)


@dataclass(frozen=True, slots=True)
class BudgetFloors:
    """Tokens used this month per budgeted subject: (level, tenant id, subject id) → tokens."""

    month: str = ""
    tokens: Mapping[tuple, int] = field(default_factory=lambda: MappingProxyType({}))

    def of(self, level: str, tenant_id: int | None, subject_id: int | None) -> tuple[str, int] | None:
        """(month, tokens) for a policy level's subject, or None when the records hold nothing."""
        used = self.tokens.get((level, tenant_id, subject_id))
        return (self.month, used) if used else None


def load_budget_floors() -> BudgetFloors:
    """`budget_floors_at` now, in a gateway database thread."""
    from django.db import close_old_connections

    close_old_connections()  # a long-lived thread must not keep a broken or stale connection
    return budget_floors_at(time.time())


def budget_floors_at(now: float) -> BudgetFloors:
    """The floors of every subject with a monthly token budget, from the usage records."""
    from quotas.models import QuotaPolicy
    from usage.budgets import subject_month_tokens

    tenants, keys, users = set(), {}, set()
    for row in QuotaPolicy.objects.filter(monthly_token_budget__isnull=False).values(
            "tenant_id", "api_key_id", "api_key__prefix", "user_id"):
        if row["api_key_id"]:
            keys[(row["tenant_id"], row["api_key__prefix"])] = row["api_key_id"]
        elif row["user_id"]:
            users.add((row["tenant_id"], row["user_id"]))
        else:
            tenants.add(row["tenant_id"])
    used = subject_month_tokens(datetime.fromtimestamp(now, timezone.utc), tenants=tenants, keys=keys, users=users)
    tokens = {}
    for subject, count in used.items():
        if subject[0] == "api_key":  # the records name keys by prefix, policies by id
            subject = ("api_key", subject[1], keys[(subject[1], subject[2])])
        elif subject[0] == "tenant":
            subject = ("tenant", subject[1], subject[1])
        tokens[subject] = count
    return BudgetFloors(month_bounds(now)[0], MappingProxyType(tokens))
