"""Budgets (the tenant-wide policy's monthly limits) and quota policies narrowed to one key or member."""
from django import forms

from console.forms.tenants import QuotaForm
from quotas.models import LIMIT_BOUNDS, MAX_MONTHLY_BUDGET_USD


class BudgetForm(forms.Form):
    """The two monthly budgets of the tenant-wide policy; its rates stay as they are."""

    monthly_token_budget = forms.IntegerField(
        label="Monthly token budget", required=False, min_value=0, max_value=LIMIT_BOUNDS["monthly_token_budget"],
        help_text="Prompt + completion tokens per calendar month (UTC). Empty means no budget.")
    monthly_budget_usd = forms.DecimalField(
        label="Monthly budget (USD)", required=False, min_value=0, max_value=MAX_MONTHLY_BUDGET_USD, decimal_places=2,
        help_text="Cost attributed to the tenant per calendar month, idle capacity included. Empty means no budget.")


class SubjectQuotaForm(QuotaForm):
    """A new policy for one API key or one member of the tenant (each level is enforced on its own)."""

    subject = forms.ChoiceField(label="Applies to", help_text="Keys and members that have no policy of their own yet.")

    field_order = ["subject"]

    def __init__(self, *args, tenant, **kwargs):
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        self.fields["subject"].choices = subject_choices(tenant)

    def limits(self) -> dict:
        limits = super().limits()
        limits.pop("subject")
        return limits

    def subject_kwargs(self) -> dict:
        """{"api_key": …} or {"user": …}, looked up inside this tenant only."""
        kind, _, pk = self.cleaned_data["subject"].partition(":")
        if kind == "key":
            return {"api_key": self.tenant.api_keys.get(pk=pk)}
        return {"user": self.tenant.memberships.select_related("user").get(user_id=pk).user}


def subject_choices(tenant) -> list[tuple[str, list[tuple[str, str]]]]:
    """Active keys and members without a policy, grouped (an HTML optgroup each)."""
    from apikeys.models import ApiKey

    keys = ApiKey.objects.usable().filter(tenant=tenant, quota_policies__isnull=True).select_related("user")
    taken_users = set(tenant.quota_policies.filter(user__isnull=False).values_list("user_id", flat=True))
    members = tenant.memberships.select_related("user").exclude(user_id__in=taken_users).order_by("user__username")
    groups = [("API keys", [(f"key:{k.pk}", f"{k.prefix}… {k.name}") for k in keys.order_by("name", "pk")]),
              ("Members", [(f"user:{m.user_id}", m.user.get_username()) for m in members])]
    return [(label, options) for label, options in groups if options]
