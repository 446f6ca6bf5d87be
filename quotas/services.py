"""Writing quota policies (validated here, whoever calls) and reading the limits that apply."""
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from audit.actor import Actor
from audit.services import record_event
from quotas.models import CAPACITY_FIELDS, MAX_ALLOWED_MODELS, QuotaPolicy, model_name_validator

LIMIT_FIELDS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests",
                "monthly_token_budget", "monthly_budget_usd", "allowed_models", *CAPACITY_FIELDS)


def create_quota_policy(*, tenant, api_key=None, user=None, actor: Actor, **limits) -> QuotaPolicy:
    """Create the policy for a tenant, or narrowed to one of its keys or members."""
    _check_subject(tenant, api_key, user)
    policy = QuotaPolicy(tenant=tenant, api_key=api_key, user=user, **_known(limits))
    _validate(policy)
    with transaction.atomic():
        policy.save()
        record_event(actor=actor, action="quota.create", tenant=tenant, target=policy, after=policy.audit_view())
    return policy


def update_quota_policy(policy: QuotaPolicy, *, actor: Actor, **limits) -> QuotaPolicy:
    """Change limits; fields not given keep their value."""
    with transaction.atomic():
        policy = QuotaPolicy.objects.select_for_update().get(pk=policy.pk)
        before = policy.audit_view()
        for name, value in _known(limits).items():
            setattr(policy, name, value)
        _validate(policy)
        policy.save()
        record_event(actor=actor, action="quota.update", tenant=policy.tenant, target=policy,
                     before=before, after=policy.audit_view())
    return policy


def set_tenant_budget(tenant, *, monthly_token_budget, monthly_budget_usd, actor: Actor) -> QuotaPolicy:
    """Set the tenant-wide monthly budgets, creating the tenant's policy if it has none (both audited)."""
    budgets = {"monthly_token_budget": monthly_token_budget, "monthly_budget_usd": monthly_budget_usd}
    policy = QuotaPolicy.objects.filter(tenant=tenant, api_key__isnull=True, user__isnull=True).first()
    if policy is None:
        return create_quota_policy(tenant=tenant, actor=actor, **budgets)
    return update_quota_policy(policy, actor=actor, **budgets)


def delete_quota_policy(policy: QuotaPolicy, *, actor: Actor) -> None:
    """Remove a key- or user-level policy (the tenant-level one can be relaxed, not removed)."""
    if policy.subject == "tenant":
        raise ValidationError({"subject": "The tenant-wide policy cannot be deleted; clear its limits instead."})
    with transaction.atomic():
        record_event(actor=actor, action="quota.delete", tenant=policy.tenant, target=policy,
                     before=policy.audit_view())
        policy.delete()


def _known(limits: dict) -> dict:
    unknown = set(limits) - set(LIMIT_FIELDS)
    if unknown:
        raise ValidationError({name: "Unknown quota field." for name in sorted(unknown)})
    return limits


def _check_subject(tenant, api_key, user) -> None:
    if api_key is not None and user is not None:
        raise ValidationError({"api_key": "Narrow a policy to a key or to a user, not both."})
    if api_key is not None and api_key.tenant_id != tenant.pk:
        raise ValidationError({"api_key": "No such key in this tenant."})
    if user is not None and not tenant.memberships.filter(user=user).exists():
        raise ValidationError({"user": "No such member in this tenant."})
    # The unique constraints still stop a concurrent duplicate; this turns the common case into a 400.
    if QuotaPolicy.objects.filter(tenant=tenant, api_key=api_key, user=user).exists():
        field = "api_key" if api_key is not None else "user" if user is not None else "subject"
        raise ValidationError({field: "A policy for this subject exists already; change it instead."})


def _validate(policy: QuotaPolicy) -> None:
    if policy.subject != "tenant":
        for name in CAPACITY_FIELDS:
            if getattr(policy, name) is not None:
                raise ValidationError({name: "Capacity quotas apply to the whole tenant, not to one key or user."})
    policy.allowed_models = _clean_models(policy.allowed_models)
    policy.full_clean(exclude=["tenant", "api_key", "user"], validate_unique=False, validate_constraints=False)


def _clean_models(names):
    if names in (None, []):
        return None
    if not isinstance(names, list) or len(names) > MAX_ALLOWED_MODELS:
        raise ValidationError({"allowed_models": f"A list of at most {MAX_ALLOWED_MODELS} model names."})
    for name in names:
        if not isinstance(name, str):
            raise ValidationError({"allowed_models": "Model names must be strings."})
        try:
            model_name_validator(name)
        except ValidationError:
            raise ValidationError({"allowed_models": f"Not a valid model name: {name[:200]!r}."}) from None
    return sorted(set(names))


@dataclass(frozen=True)
class AppliedLimits:
    """Every policy that governs a request by (tenant, key, user); each is enforced on its own."""

    tenant: QuotaPolicy | None
    api_key: QuotaPolicy | None
    user: QuotaPolicy | None
    user_requests_per_minute: int


def limits_for(*, tenant, api_key=None, user=None) -> AppliedLimits:
    """The policies that apply; a user without a rate of their own gets the default per-user rate."""
    policies = {p.subject: p for p in QuotaPolicy.objects.filter(tenant=tenant).filter(
        _subject_filter(api_key, user))}
    user_policy = policies.get("user")
    user_rpm = getattr(user_policy, "requests_per_minute", None) or settings.SWITCHYARD_DEFAULT_USER_RPM
    return AppliedLimits(tenant=policies.get("tenant"), api_key=policies.get("api_key"), user=user_policy,
                         user_requests_per_minute=user_rpm)


def _subject_filter(api_key, user):
    from django.db.models import Q

    condition = Q(api_key__isnull=True, user__isnull=True)
    if api_key is not None:
        condition |= Q(api_key=api_key)
    if user is not None and getattr(user, "pk", None):
        condition |= Q(user=user)
    return condition
