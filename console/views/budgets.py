"""Budgets: each tenant's monthly token and money budget against its month-to-date use, and editing them.

The figures are `usage.BudgetState`, written every minute by `usage.enforce_budgets` — the same
numbers the gateway refuses requests by, so the page never disagrees with enforcement.
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
from usage.models import BudgetState
from usage.periods import month_start

# A bar turns amber from this share of a budget on (and red at 100 %).
WARN_SHARE = 0.8


@dataclass(frozen=True)
class Usage:
    """One budget against its use: share is used ÷ budget (None without a budget)."""

    budget: object
    used: object

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
    start = month_start(timezone.now())
    return [_row(principal, t, policies.get(t.pk), states.get(t.pk), start) for t in tenants]


def _row(principal, tenant, policy, state, start) -> dict:
    # Figures checked before the month turned are last month's: this month starts at zero.
    figures = state if state and state.checked_at and state.checked_at >= start else None
    tokens = Usage(getattr(policy, "monthly_token_budget", None), getattr(figures, "tokens_month_to_date", 0))
    usd = Usage(getattr(policy, "monthly_budget_usd", None), getattr(figures, "cost_month_to_date_usd", 0))
    return {"tenant": tenant, "state": state, "tokens": tokens, "usd": usd,
            "has_budget": tokens.budget is not None or usd.budget is not None,
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
