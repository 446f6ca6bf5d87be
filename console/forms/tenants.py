"""Tenant, member and quota forms (validation proper happens in the services)."""
from django import forms

from quotas.services import LIMIT_FIELDS
from tenants.models import Isolation
from tenants.roles import Perm, Role


class TenantCreateForm(forms.Form):
    slug = forms.SlugField(max_length=63,
                           help_text="Lowercase letters, digits and hyphens; used in URLs and API paths.")
    name = forms.CharField(max_length=200)
    region = forms.CharField(max_length=64, initial="local")
    isolation = forms.ChoiceField(choices=Isolation.choices, initial=Isolation.SHARED)
    admin_email = forms.EmailField(label="Owner's e-mail",
                                   help_text="Invited as the tenant's first owner (a one-time link).")


class MemberAddForm(forms.Form):
    """An invitation to an address: nothing about accounts outside the tenant is looked up or shown."""

    email = forms.EmailField(help_text="They join when the account with this address accepts the invitation.")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.DEVELOPER)


class GrantForm(forms.Form):
    """One permission beyond a member's role, on this tenant (docs/roles.md, per-object grants)."""

    member = forms.TypedChoiceField(coerce=int, label="Member")
    permission = forms.ChoiceField(choices=Perm.choices, label="Permission")

    def __init__(self, *args, tenant, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["member"].choices = [(m.user_id, m.user.get_username()) for m in
                                         tenant.memberships.select_related("user").order_by("user__username")]


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


def _limit(label: str) -> forms.IntegerField:
    return forms.IntegerField(label=label, required=False, min_value=0, help_text="Empty means no limit.")


class QuotaForm(forms.Form):
    """The tenant-wide policy: each limit is enforced on its own."""

    requests_per_minute = _limit("Requests per minute")
    tokens_per_minute = _limit("Tokens per minute")
    max_concurrent_requests = _limit("Concurrent requests")
    monthly_token_budget = _limit("Monthly token budget")
    monthly_budget_usd = forms.DecimalField(label="Monthly budget (USD)", required=False, min_value=0,
                                            decimal_places=2, help_text="Empty means no limit.")
    allowed_models = forms.CharField(label="Allowed models", required=False,
                                     help_text="Comma-separated model names; empty means every model.")

    @classmethod
    def for_policy(cls, policy, data=None):
        initial = {name: getattr(policy, name) for name in LIMIT_FIELDS}
        initial["allowed_models"] = ", ".join(policy.allowed_models or [])
        return cls(data=data, initial=initial)

    def limits(self) -> dict:
        limits = dict(self.cleaned_data)
        names = [n.strip() for n in limits.pop("allowed_models").split(",") if n.strip()]
        return {**limits, "allowed_models": names or None}


class ObjectGrantForm(forms.Form):
    """One permission on one object (a deployment) for one member of its tenant (docs/roles.md)."""

    member = forms.TypedChoiceField(coerce=int, label="Member")
    permission = forms.ChoiceField(label="Permission on this deployment")

    def __init__(self, *args, tenant, permissions, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["member"].choices = [(m.user_id, f"{m.user.get_username()} ({m.role})") for m in
                                         tenant.memberships.select_related("user").order_by("user__username")]
        self.fields["permission"].choices = [(code, f"{code} — {label}") for code, (_, label) in permissions.items()]
