"""Audit trail: filters, pages of events, CSV/JSONL export with its signed manifest, chain verification."""
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods, require_safe
from rest_framework.exceptions import ValidationError as ApiValidationError

from audit.actor import Actor
from audit.export import FORMATS, stream_with_manifest
from audit.selectors import apply_filters, events_visible_to
from audit.services import issue_manifest
from audit.verify import verify_trail
from console.access import principal_of, require_platform_admin, sees_audit, tenants_with
from console.forms.audit import AuditFilterForm, SinceManifestForm
from console.views.common import error_text
from tenants.roles import Perm

PAGE_SIZE = 50
CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}


def _filtered(request, perm: str):
    """(form, events) for the query string, or 404 when the user has no audit role anywhere."""
    principal = principal_of(request)
    if not sees_audit(principal):
        raise Http404("Not found.")
    form = AuditFilterForm(request.GET or None)
    filters = form.filters() if form.is_bound else {}
    try:
        return form, filters, apply_filters(events_visible_to(principal, perm), filters)
    except ApiValidationError as exc:
        messages.error(request, error_text(exc))
        return form, {}, events_visible_to(principal, perm).none()


def _can_export(principal) -> bool:
    return principal.is_platform_admin or bool(tenants_with(principal, Perm.EXPORT_AUDIT))


@login_required
@require_safe
def audit_page(request):
    form, filters, events = _filtered(request, Perm.VIEW_AUDIT)
    page = Paginator(events.order_by("-seq"), PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    principal = principal_of(request)
    return render(request, "console/audit.html", {
        "form": form, "page": page, "query": query.urlencode(), "filtered": bool(filters),
        "can_export": _can_export(principal), "is_platform_admin": principal.is_platform_admin})


def _export_args(request):
    principal = principal_of(request)
    if not sees_audit(principal):
        raise Http404("Not found.")
    if not _can_export(principal):
        from django.core.exceptions import PermissionDenied

        raise PermissionDenied("Your role does not allow exporting the audit trail.")
    fmt = request.GET.get("format", "jsonl")
    if fmt not in FORMATS:
        raise Http404("Unknown export format.")
    _, filters, events = _filtered(request, Perm.EXPORT_AUDIT)
    return fmt, filters, events


@login_required
@require_safe
def audit_export(request):
    fmt, filters, events = _export_args(request)
    chunks, _ = stream_with_manifest(events, fmt, filters)
    response = StreamingHttpResponse(chunks, content_type=CONTENT_TYPES[fmt])
    response["Content-Disposition"] = f'attachment; filename="switchyard-audit.{fmt}"'
    return response


@login_required
@require_safe
def audit_manifest(request):
    """The signed manifest of the export with the same filters (computed by streaming it once)."""
    import json

    fmt, filters, events = _export_args(request)
    chunks, builder = stream_with_manifest(events, fmt, filters)
    for _ in chunks:
        pass
    manifest = issue_manifest(builder, actor=Actor.from_request(request))
    response = HttpResponse(json.dumps(manifest, indent=2), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="switchyard-audit.{fmt}.manifest.json"'
    return response


@login_required
@require_http_methods(["GET", "HEAD", "POST"])  # POST: a manifest uploaded to check against
def audit_verify(request):
    """Platform admins: walk the whole chain now (and check it against the witness, or an uploaded manifest)."""
    require_platform_admin(request, hide=True)
    form = SinceManifestForm(request.POST, request.FILES) if request.method == "POST" else SinceManifestForm()
    manifests = [form.cleaned_data["manifest"]] if form.is_bound and form.is_valid() else []
    verdict = verify_trail(manifests=manifests)
    return render(request, "console/audit_verify.html", {
        "verdict": verdict, "form": form, "since_manifest": manifests[0] if manifests else None,
        "witness_file": settings.SWITCHYARD_AUDIT_WITNESS_FILE})
