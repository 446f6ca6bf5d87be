"""API keys: list (developers: their own), create and rotate (the secret is shown once), revoke; platform keys."""
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST, require_safe

from apikeys import services
from apikeys.models import ApiKey
from apikeys.scopes import Scope
from audit.actor import Actor
from console.access import KEY_PERMS, principal_of, require_rank, tenants_with
from console.forms.keys import KeyCreateForm, PlatformKeyCreateForm
from console.views.common import form_errors, run_service
from tenants.access import has_perm
from tenants.roles import Perm, Role

WRITE_PERMS = (Perm.MANAGE_KEYS, Perm.MANAGE_OWN_KEYS)


def visible_keys(principal, tenant, user):
    """Every key of the tenant for VIEW_KEYS / MANAGE_KEYS holders; otherwise one's own."""
    keys = ApiKey.objects.filter(tenant=tenant).select_related("user")
    if has_perm(principal, tenant, Perm.VIEW_KEYS) or has_perm(principal, tenant, Perm.MANAGE_KEYS):
        return keys
    return keys.filter(user=user)


@login_required
@require_safe
def key_list(request):
    return _key_page(request)


def _key_page(request, form=None, platform_form=None, status=200):
    principal = principal_of(request)
    tenants = tenants_with(principal, *KEY_PERMS)
    if not tenants and not principal.is_platform_admin:
        raise Http404("Not found.")
    sections = [{"tenant": t, "keys": visible_keys(principal, t, request.user)[:200],
                 "can_write": any(has_perm(principal, t, p) for p in WRITE_PERMS)} for t in tenants]
    writable = tenants_with(principal, *WRITE_PERMS)
    form = form or (KeyCreateForm(tenants=writable, initial={"tenant": request.GET.get("tenant")})
                    if writable else None)
    context = {"sections": sections, "form": form}
    if principal.is_platform_admin:
        context["platform"] = {"keys": ApiKey.objects.filter(tenant__isnull=True).select_related("user")[:200],
                               "form": platform_form or PlatformKeyCreateForm()}
    return render(request, "console/keys/list.html", context, status=status)


@login_required
@require_POST
@never_cache
def platform_key_create(request):
    """A platform admin mints a tenant-less key acting as themselves (docs/api-keys.md#platform-keys)."""
    if not principal_of(request).is_platform_admin:
        raise Http404("Not found.")
    form = PlatformKeyCreateForm(request.POST)
    if not form.is_valid():
        form_errors(request, form)
        return _key_page(request, platform_form=form, status=400)
    minted = run_service(request, lambda: services.create_platform_key(
        name=form.cleaned_data["name"], user=request.user, expires_at=form.expires_at(),
        actor=Actor.from_request(request)))
    if minted is None:
        return redirect("console:keys")
    return render(request, "console/keys/secret.html", {"minted": minted, "verb": "created"})


@login_required
@require_POST
@never_cache
def key_create(request):
    principal = principal_of(request)
    form = KeyCreateForm(request.POST, tenants=tenants_with(principal, *WRITE_PERMS))
    if not form.is_valid():
        form_errors(request, form)
        return _key_page(request, form=form, status=400)
    tenant = next(t for t in tenants_with(principal, *WRITE_PERMS) if t.slug == form.cleaned_data["tenant"])
    fields = _key_fields(request, principal, tenant, form)
    minted = run_service(request,
                         lambda: services.create_api_key(tenant=tenant, **fields, actor=Actor.from_request(request)))
    if minted is None:
        return redirect("console:keys")
    return render(request, "console/keys/secret.html", {"minted": minted, "verb": "created"})


def _key_fields(request, principal, tenant, form) -> dict:
    data = form.cleaned_data
    if has_perm(principal, tenant, Perm.MANAGE_KEYS):
        require_rank(request, tenant, data["role"])
        return {"name": data["name"], "scopes": data["scopes"], "role": data["role"], "user": request.user,
                "expires_at": form.expires_at()}
    # Self-service: an inference key of one's own, at the developer role, whatever the form said.
    return {"name": data["name"], "scopes": [Scope.INFERENCE], "role": Role.DEVELOPER, "user": request.user,
            "expires_at": form.expires_at()}


def _manageable(request, key_id) -> ApiKey:
    """The key, if the user may revoke or rotate it; keys they cannot see are a 404."""
    principal = principal_of(request)
    key = ApiKey.objects.select_related("tenant", "user").filter(pk=key_id).first()
    if key is not None and key.tenant_id is None:  # a platform key: platform admins' alone
        if not principal.is_platform_admin:
            raise Http404("No such key.")
        return key
    if key is None or key.tenant not in tenants_with(principal, *KEY_PERMS) or \
            not visible_keys(principal, key.tenant, request.user).filter(pk=key.pk).exists():
        raise Http404("No such key.")
    own = key.user_id == request.user.pk and has_perm(principal, key.tenant, Perm.MANAGE_OWN_KEYS)
    if not (has_perm(principal, key.tenant, Perm.MANAGE_KEYS) or own):
        from django.core.exceptions import PermissionDenied

        raise PermissionDenied("Your role may not manage this key.")
    require_rank(request, key.tenant, key.role)
    return key


@login_required
@require_POST
def key_revoke(request, key_id):
    key = _manageable(request, key_id)
    run_service(request, lambda: services.revoke_api_key(key, actor=Actor.from_request(request)),
                f"Key {key.prefix}… revoked.")
    return redirect("console:keys")


@login_required
@require_POST
@never_cache
def key_rotate(request, key_id):
    key = _manageable(request, key_id)
    minted = run_service(request, lambda: services.rotate_api_key(key, actor=Actor.from_request(request)))
    if minted is None:
        return redirect("console:keys")
    return render(request, "console/keys/secret.html", {"minted": minted, "verb": "rotated", "old": key})
