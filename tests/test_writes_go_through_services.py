"""Views, tasks, management commands, the console and the admin never save a model themselves (CONVENTIONS 2).

A write made there would skip the service's validation, its transaction and its audit event. The
modules are found on disk, so a new app's views and commands are covered without editing this file.
"""
import ast
from pathlib import Path

import pytest
from django.contrib import admin
from django.urls import URLResolver, get_resolver
from django.views.generic.edit import DeletionMixin, ModelFormMixin
from rest_framework import mixins

ROOT = Path(__file__).resolve().parent.parent
# Write methods of models, managers, querysets and forms. `create` and `update` are also dict and set
# methods, so they count only on a chain (`X.objects.create`, `tenant.memberships.create`), not a name.
ALWAYS_WRITES = {"save", "delete", "get_or_create", "update_or_create", "bulk_create", "bulk_update", "create_user",
                 "create_superuser"}
CHAIN_WRITES = {"create", "update"}
NOT_MODELS = {"cache", "session"}  # receivers whose delete/update are no database write
# (module path, call) -> why it may write directly. Empty: keep it that way.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def caller_modules() -> list[Path]:
    """Every app's views, API, tasks, management commands and admin, and the whole console."""
    patterns = ("*/views.py", "*/views/**/*.py", "*/api/**/*.py", "*/tasks.py", "*/management/commands/*.py",
                "*/admin.py", "console/**/*.py")
    apps = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    return sorted({path for pattern in patterns for path in ROOT.glob(pattern)
                   if path.relative_to(ROOT).parts[0] in apps})


def _receiver_root(node: ast.expr) -> str:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def direct_writes(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        receiver, method = node.func.value, node.func.attr
        if _receiver_root(receiver) in NOT_MODELS or ast.unparse(receiver).endswith(tuple(NOT_MODELS)):
            continue
        if method in ALWAYS_WRITES or (method in CHAIN_WRITES and not isinstance(receiver, ast.Name)):
            found.append(ast.unparse(node.func))
    return found


def test_the_scan_finds_the_callers_of_every_app():
    names = {str(path.relative_to(ROOT)) for path in caller_modules()}
    assert {"fleet/api/views.py", "usage/tasks.py", "console/views/keys.py", "fleet/admin.py",
            "console/management/commands/seed_demo.py", "audit/management/commands/audit_export.py"} <= names


def test_the_scan_recognises_a_direct_write(tmp_path):
    sample = tmp_path / "views.py"
    sample.write_text("def v(request, t, form, rows):\n    t.save()\n    Tenant.objects.filter(pk=1).update(name='x')\n"
                      "    t.memberships.create(role='viewer')\n    form.save()\n"
                      "    rows.update(a=1)\n    cache.delete('k')\n    request.session.delete()\n")
    assert direct_writes(sample) == ["t.save", "Tenant.objects.filter(pk=1).update", "t.memberships.create",
                                     "form.save"]


@pytest.mark.parametrize("path", caller_modules(), ids=lambda path: str(path.relative_to(ROOT)))
def test_callers_write_only_through_services(path):
    relative = str(path.relative_to(ROOT))
    assert [call for call in direct_writes(path) if (relative, call) not in EXCEPTIONS] == []


def _views(patterns):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _views(pattern.url_patterns)
        else:
            callback = pattern.callback
            yield getattr(callback, "cls", None) or getattr(callback, "view_class", None)


# A routed class whose inherited write is Django's or DRF's default saves the model itself.
IMPLICIT_WRITES = ((mixins.CreateModelMixin, "perform_create"), (mixins.UpdateModelMixin, "perform_update"),
                   (mixins.DestroyModelMixin, "perform_destroy"), (ModelFormMixin, "form_valid"),
                   (DeletionMixin, "delete"))


def test_no_routed_view_inherits_a_default_model_write():
    offenders = set()
    for view in filter(None, _views(get_resolver().url_patterns)):
        if view.__module__.startswith(("django.contrib.admin", "django.contrib.auth")):
            continue  # the admin site: test_the_admin_of_our_models_is_read_only
        for mixin, method in IMPLICIT_WRITES:
            if issubclass(view, mixin) and getattr(view, method) is getattr(mixin, method):
                offenders.add(f"{view.__module__}.{view.__qualname__}.{method}")
    assert offenders == set()


# Models whose admin pages may write, and why.
ADMIN_WRITES = {
    "auth.user": "Django's user admin, for platform staff; its changes go to django_admin_log, not the chain",
    "auth.group": "Django's group admin: Switchyard grants no permission through groups",
}


@pytest.mark.parametrize("model_admin", admin.site._registry.values(), ids=lambda a: a.model._meta.label_lower)
def test_the_admin_of_our_models_is_read_only(model_admin, rf):
    if model_admin.model._meta.label_lower in ADMIN_WRITES:
        return
    request = rf.get("/admin/")
    request.user = type("Staff", (), {"is_active": True, "is_staff": True, "is_superuser": True,
                                      "has_perm": lambda self, perm, obj=None: True})()
    assert not (model_admin.has_add_permission(request) or model_admin.has_change_permission(request)
                or model_admin.has_delete_permission(request))
