"""Console template helpers: the main navigation (only sections the user may open) and number formats."""
from decimal import Decimal

from django import template
from django.urls import reverse

from console.access import (
    KEY_PERMS,
    REGISTRY,
    USAGE,
    principal_of,
    sees_audit,
    sees_budgets,
    sees_operations,
    sees_slow_requests,
    tenants_with,
)
from fleet.permissions import reads_fleet_somewhere
from tenants.access import holds_anywhere
from tenants.selectors import open_invitations_for

register = template.Library()


def _sections(request) -> list[tuple[str, str]]:
    principal = principal_of(request)
    ops, items = sees_operations(principal), []
    if holds_anywhere(principal, *USAGE):
        items.append(("Overview", "console:home"))
    if ops:
        items.append(("Tenants", "console:tenants"))
    if tenants_with(principal, *KEY_PERMS):
        items.append(("API keys", "console:keys"))
    if reads_fleet_somewhere(principal):  # the fleet rule, or a per-object grant on one deployment
        items.append(("Fleet", "console:fleet"))
    for label, name, perms in (("Models", "console:models", REGISTRY), ("Usage & cost", "console:usage", USAGE)):
        if holds_anywhere(principal, *perms):
            items.append((label, name))
    if sees_budgets(principal):
        items.append(("Budgets", "console:budgets"))
    if holds_anywhere(principal, *USAGE):
        items.append(("GPU prices", "console:prices"))
    if holds_anywhere(principal, *REGISTRY):
        items.append(("Capacity", "console:capacity"))
    if sees_audit(principal):
        items.append(("Audit", "console:audit"))
    if sees_slow_requests(principal):
        items.append(("Slow requests", "console:slow"))
    if open_invitations_for(request.user).exists():
        items.append(("Invitations", "console:invitations"))
    return items


@register.inclusion_tag("console/_nav.html", takes_context=True)
def console_nav(context):
    request = context["request"]
    links = [{"label": label, "url": reverse(name),
              "current": request.path == reverse(name) or (
                  name != "console:home" and request.path.startswith(reverse(name)))}
             for label, name in _sections(request)]
    return {"links": links}


@register.filter
def percent(value, digits=1):
    return "—" if value is None else f"{value * 100:.{digits}f} %"


@register.filter
def ms(value):
    return "—" if value is None else f"{value:,.0f} ms"


@register.filter
def usd(value, digits=4):
    """Dollars from a Decimal, float or the selectors' decimal strings."""
    if value in (None, ""):
        return "—"
    amount = Decimal(str(value))
    # Sub-cent amounts (a few GPU-seconds) keep six decimals instead of reading as $0.0000.
    return f"${amount:,.{max(digits, 6) if 0 < abs(amount) < Decimal('0.01') else digits}f}"


@register.filter
def money(value, digits=2):
    return "—" if value in (None, "") else f"{Decimal(str(value)):,.{digits}f}"


@register.filter
def num(value, digits=0):
    return "—" if value is None else f"{value:,.{digits}f}"
