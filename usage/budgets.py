"""Monthly budgets: month-to-date tokens and cost per tenant against its tenant-wide quota policy."""
from collections import defaultdict
from datetime import datetime
from decimal import Decimal

from django.core.cache import cache
from django.db.models import Q, Sum

from audit.actor import Actor
from quotas.models import QuotaPolicy
from usage.cost.hourly import range_shares
from usage.live import watermark
from usage.models import BudgetState, CostRollup, Granularity, UsageEvent, UsageRollup
from usage.periods import HOUR, floor_hour, month_start
from usage.services import BUDGET_CACHE_KEY, set_budget_state

ACTOR = Actor.system("usage.enforce_budgets")


def month_to_date(now: datetime, tenant_ids=None) -> dict[int, tuple[int, Decimal]]:
    """tenant id → (prompt + completion tokens, attributed cost incl. idle) since the month began;
    `tenant_ids` narrows it to those tenants (the console's budgets page), None means every tenant."""
    start = month_start(now)
    live_from = max(watermark(now), start)
    tokens: defaultdict[int, int] = defaultdict(int)
    cost: defaultdict[int, Decimal] = defaultdict(Decimal)
    which = Q(tenant__isnull=False) if tenant_ids is None else Q(tenant_id__in=list(tenant_ids))
    rolled = CostRollup.objects.filter(which, granularity=Granularity.HOUR, period_start__gte=start,
                                       period_start__lt=live_from)
    for (tenant_id, _), used in _month_tokens(start, live_from, which, now).items():
        tokens[tenant_id] += used
    for row in rolled.values("tenant_id").annotate(s=Sum("cost_usd")).order_by():
        cost[row["tenant_id"]] += row["s"]
    for shares in range_shares(live_from, floor_hour(now) + HOUR, now).values():
        for share in shares:
            if share.tenant_id is not None and (tenant_ids is None or share.tenant_id in tenant_ids):
                cost[share.tenant_id] += share.cost_usd
    return {tenant: (tokens[tenant], cost[tenant]) for tenant in set(tokens) | set(cost)}


def _month_tokens(start: datetime, live_from: datetime, which: Q, until: datetime | None = None) -> dict:
    """(tenant id, API key prefix) → prompt + completion tokens since `start`: final hourly rollups
    before `live_from`, raw events from it on (to `until`, else all of them)."""
    tokens: defaultdict[tuple, int] = defaultdict(int)
    rolled = UsageRollup.objects.filter(which, granularity=Granularity.HOUR, period_start__gte=start,
                                        period_start__lt=live_from)
    live = UsageEvent.objects.filter(which, occurred_at__gte=live_from)
    if until is not None:
        live = live.filter(occurred_at__lt=until)
    for rows in (rolled, live):
        for row in rows.values("tenant_id", "api_key_prefix").annotate(
                p=Sum("prompt_tokens"), c=Sum("completion_tokens")).order_by():
            tokens[(row["tenant_id"], row["api_key_prefix"])] += row["p"] + row["c"]
    return tokens


def subject_month_tokens(now: datetime, *, tenants=(), keys=(), users=()) -> dict[tuple, int]:
    """What the usage records say budgeted subjects used this month (prompt + completion tokens).

    `tenants`: tenant ids; `keys`: (tenant id, key prefix); `users`: (tenant id, user id).
    Answers ("tenant", tenant) / ("api_key", tenant, prefix) / ("user", tenant, user) → tokens.
    Tenants and keys are read from final hourly rollups and the raw events after them; users from
    raw events only (rollups carry no user), so a user's month is as long as raw events are kept.
    The gateway counts each budget at least this much (gateway.limits.budget_floors)."""
    start = month_start(now)
    out: dict[tuple, int] = {}
    live_from = max(watermark(now), start)
    tenants, keys, users = set(tenants), set(keys), set(users)
    if tenants or keys:
        which = Q(tenant_id__in=tenants | {t for t, _ in keys})
        for (tenant_id, prefix), used in _month_tokens(start, live_from, which).items():
            if tenant_id in tenants:
                out[("tenant", tenant_id)] = out.get(("tenant", tenant_id), 0) + used
            if (tenant_id, prefix) in keys:
                out[("api_key", tenant_id, prefix)] = used
    if users:
        events = UsageEvent.objects.filter(occurred_at__gte=start, tenant_id__in={t for t, _ in users},
                                           user_id__in={u for _, u in users})
        for row in events.values("tenant_id", "user_id").annotate(
                p=Sum("prompt_tokens"), c=Sum("completion_tokens")).order_by():
            if (row["tenant_id"], row["user_id"]) in users:
                out[("user", row["tenant_id"], row["user_id"])] = row["p"] + row["c"]
    return out


def over_reason(policy: QuotaPolicy, tokens: int, cost: Decimal) -> str | None:
    """Names the budget that is used up, or None. Stable wording: it only changes when the state does."""
    if policy.monthly_token_budget is not None and tokens >= policy.monthly_token_budget:
        return f"monthly token budget of {policy.monthly_token_budget:,} tokens used up"
    if policy.monthly_budget_usd is not None and cost >= policy.monthly_budget_usd:
        return f"monthly budget of ${policy.monthly_budget_usd:,.2f} used up"
    return None


def enforce_budgets(now: datetime) -> dict:
    """Put tenants over budget (or back within it) via `set_budget_state`; returns how many are over."""
    usage = month_to_date(now)
    over_now = set(BudgetState.objects.filter(over_budget=True).values_list("tenant_id", flat=True))
    policies = QuotaPolicy.objects.filter(api_key__isnull=True, user__isnull=True).filter(
        Q(monthly_token_budget__isnull=False) | Q(monthly_budget_usd__isnull=False) | Q(tenant_id__in=over_now))
    over = 0
    for policy in policies.select_related("tenant"):
        tokens, cost = usage.get(policy.tenant_id, (0, Decimal(0)))
        reason = over_reason(policy, tokens, cost)
        set_budget_state(policy.tenant, over_budget=reason is not None, reason=reason or "", tokens=tokens,
                         cost_usd=cost, actor=ACTOR)
        over += reason is not None
    return {"checked": len(policies), "over_budget": over}


def is_over_budget(tenant_id: int) -> str | None:
    """The reason naming the used-up budget, or None. Cached: the gateway may call it per request."""
    cached = cache.get(BUDGET_CACHE_KEY.format(tenant_id))
    if cached is None:
        state = BudgetState.objects.filter(tenant_id=tenant_id, over_budget=True).values_list("reason", flat=True)
        cached = state.first() or ""
        cache.set(BUDGET_CACHE_KEY.format(tenant_id), cached, 60)
    return cached or None


def over_budget_tenants() -> dict[int, str]:
    """Every tenant over budget with its reason, for the gateway's in-memory snapshot."""
    return dict(BudgetState.objects.filter(over_budget=True).values_list("tenant_id", "reason"))
