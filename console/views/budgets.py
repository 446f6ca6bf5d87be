"""Budgets: each tenant's monthly token and money budget against its month-to-date use, and editing them.

A tenant with a budget shows `usage.BudgetState`, written every minute by `usage.enforce_budgets` —
the same numbers the gateway refuses requests by, so the page never disagrees with enforcement. A
tenant without one (or not checked yet this month) shows its use computed as that task computes it.
"""
from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_safe

from audit.actor import Actor
from console.access import QUOTAS, budget_tenants, budgets_or_404, principal_of, require, tenant_or_404
from console.forms.quotas import BudgetForm
from console.views.common import run_form_service
from quotas.models import QuotaPolicy
from quotas.services import set_tenant_budget
from tenants.access import has_perm
from tenants.roles import Perm
from usage.budgets import month_to_date
from usage.models import BudgetState
from usage.periods import month_start

# A bar turns amber from this share of a budget on (and red at 100 %).
WARN_SHARE = 0.8


@dataclass(frozen=True)
class Usage:
    """One budget against its use: share is used ÷ budget (None without a budget)."""

    budget: int | Decimal | None
    used: int | Decimal

    @property
    def share(self) -> float | None:
        if self.budget is None:
            return None
        return 1.0 if self.budget == 0 else float(Decimal(self.used) / Decimal(self.budget))

    @property
    def percent(self) -> float | None:
        return None if self.share is None else round(self.share * 100, 1)

    @property
    def bar(self) -> float:
        """What the progress bar shows: capped at 100 (the text gives the real figure)."""
        return min(self.percent or 0.0, 100.0)

    @property
    def level(self) -> str:
        share = self.share or 0.0
        return "over" if share >= 1 else "warn" if share >= WARN_SHARE else "ok"


def budget_rows(principal, tenants) -> list[dict]:
    """One row per tenant: its budgets (tenant-wide policy), this month's use and its budget state."""
    policies = {p.tenant_id: p for p in QuotaPolicy.objects.filter(
        tenant__in=tenants, api_key__isnull=True, user__isnull=True)}
    states = {s.tenant_id: s for s in BudgetState.objects.filter(tenant__in=tenants)}
    now = timezone.now()
    checked = {t.pk: _checked(policies.get(t.pk), states.get(t.pk), month_start(now)) for t in tenants}
    unchecked = [pk for pk, figures in checked.items() if figures is None]
    computed = month_to_date(now, unchecked) if unchecked else {}
    return [_row(principal, t, policies.get(t.pk), states.get(t.pk),
                 checked[t.pk] or computed.get(t.pk, (0, Decimal(0)))) for t in tenants]


def _checked(policy, state, start) -> tuple | None:
    """The enforcement's figures, while it keeps them fresh: the tenant has a budget and was checked this month."""
    if not _has_budget(policy) or state is None or state.checked_at is None or state.checked_at < start:
        return None
    return state.tokens_month_to_date, state.cost_month_to_date_usd


def _has_budget(policy) -> bool:
    return policy is not None and (policy.monthly_token_budget is not None or policy.monthly_budget_usd is not None)


def _row(principal, tenant, policy, state, figures: tuple) -> dict:
    tokens = Usage(getattr(policy, "monthly_token_budget", None), figures[0])
    usd = Usage(getattr(policy, "monthly_budget_usd", None), figures[1])
    return {"tenant": tenant, "state": state, "tokens": tokens, "usd": usd, "has_budget": _has_budget(policy),
            "can_edit": has_perm(principal, tenant, Perm.MANAGE_QUOTAS)}


@login_required
@require_safe
def budget_list(request):
    principal = budgets_or_404(request)
    rows = budget_rows(principal, budget_tenants(principal))
    return render(request, "console/budgets/list.html", {
        "rows": rows, "month_start": month_start(timezone.now()), "any_editable": any(r["can_edit"] for r in rows)})


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def budget_edit(request, slug):
    tenant = tenant_or_404(request, slug, QUOTAS)
    require(request, tenant, Perm.MANAGE_QUOTAS)
    policy = QuotaPolicy.objects.filter(tenant=tenant, api_key__isnull=True, user__isnull=True).first()
    if request.method != "POST":
        initial = {n: getattr(policy, n) for n in BudgetForm.base_fields} if policy else {}
        return _edit_page(request, tenant, BudgetForm(initial=initial))
    form = BudgetForm(request.POST)
    if form.is_valid() and run_form_service(
            request, form, lambda: set_tenant_budget(tenant, **form.cleaned_data, actor=Actor.from_request(request)),
            f"Budgets of {tenant.slug} saved; the state is re-checked within a minute."):
        return redirect("console:budgets")
    return _edit_page(request, tenant, form)


def _edit_page(request, tenant, form):
    rows = budget_rows(principal_of(request), [tenant])
    return render(request, "console/budgets/edit.html", {"tenant": tenant, "form": form, "row": rows[0]})
