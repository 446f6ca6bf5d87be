"""Model registry: members who may read it (the API's rule) read it; platform admins register and move versions.
Artifact URIs only for those who may see registry internals (tenants.roles.FIELD_RULES)."""
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST, require_safe

from audit.actor import Actor
from console.access import REGISTRY, page_or_404, require_platform_admin
from console.forms.registry import ModelForm, VersionForm
from console.views.common import form_errors, run_service
from models_registry import services
from models_registry.models import Model, ModelVersion
from tenants.access import holds_anywhere
from tenants.roles import FIELD_RULES

LIFECYCLE = {"publish": services.publish_version, "deprecate": services.deprecate_version,
             "retire": services.retire_version}
NEXT_ACTION = {"draft": ("publish", "Publish"), "published": ("deprecate", "Deprecate"),
               "deprecated": ("retire", "Retire")}


@login_required
@require_safe
def model_list(request):
    principal = page_or_404(request, REGISTRY)
    models = Model.objects.prefetch_related("versions").order_by("name")
    admin = principal.is_platform_admin
    rows = [{"model": m, "version_form": VersionForm(prefix=f"m{m.pk}") if admin else None,
             "versions": [{"version": v, "next": NEXT_ACTION.get(v.status)}
                          for v in m.versions.order_by("-created_at")]}
            for m in models]
    return render(request, "console/models/list.html", {
        "rows": rows, "is_platform_admin": admin, "model_form": ModelForm() if admin else None,
        "show_internals": holds_anywhere(principal, FIELD_RULES["model_version"][1])})


@login_required
@require_POST
def model_create(request):
    require_platform_admin(request)
    form = ModelForm(request.POST)
    if not form.is_valid():
        form_errors(request, form)
    else:
        run_service(request, lambda: services.register_model(**form.cleaned_data, actor=Actor.from_request(request)),
                    f"Model {form.cleaned_data['name']} registered.")
    return redirect("console:models")


@login_required
@require_POST
def version_create(request, model_id):
    require_platform_admin(request)
    model = get_object_or_404(Model, pk=model_id)
    form = VersionForm(request.POST, prefix=f"m{model.pk}")
    if not form.is_valid():
        form_errors(request, form)
    else:
        run_service(request, lambda: services.create_version(model=model, **form.cleaned_data,
                                                             actor=Actor.from_request(request)),
                    f"Draft {model.name}@{form.cleaned_data['version']} created.")
    return redirect("console:models")


@login_required
@require_POST
def version_action(request, version_id, action):
    require_platform_admin(request)
    version = get_object_or_404(ModelVersion.objects.select_related("model"), pk=version_id)
    run_service(request, lambda: LIFECYCLE[action](version, actor=Actor.from_request(request)),
                f"{version}: {action} done.")
    return redirect("console:models")
