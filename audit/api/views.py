"""The audit trail over REST: read, export (streamed), manifest, chain status."""
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.actor import Actor
from audit.api.serializers import ExportManifestSerializer, VerdictSerializer, VerifySinceManifestSerializer
from audit.export import FORMATS, stream_with_manifest
from audit.models import AuditEvent
from audit.selectors import FILTER_NAMES, apply_filters, events_visible_to
from audit.services import issue_manifest
from audit.verify import verify_trail
from controlplane.api.pagination import NewestFirstCursorPagination
from controlplane.api.viewsets import ReadRuleMixin
from tenants.access import Principal, has_perm, visible_tenants
from tenants.roles import Perm, Resource

FILTER_PARAMETERS = [OpenApiParameter(name, str, description=f"Filter by {name}") for name in FILTER_NAMES]
CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}


class AuditEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = ["seq", "occurred_at", "actor_id", "actor_label", "actor_type", "tenant_id", "tenant_slug",
                  "action", "target_type", "target_id", "before", "after", "request_id", "source_ip",
                  "prev_hash", "hash"]
        read_only_fields = fields


@extend_schema(parameters=FILTER_PARAMETERS)
class AuditEventViewSet(ReadRuleMixin, viewsets.ReadOnlyModelViewSet):
    """Audit events the caller may read, newest first (403 for a caller who may read no tenant's)."""

    resource = Resource.AUDIT
    serializer_class = AuditEventSerializer
    pagination_class = NewestFirstCursorPagination
    lookup_field = "seq"
    lookup_value_regex = r"[0-9]+"
    filter_backends = []

    def get_queryset(self):
        events = events_visible_to(self.principal, Perm.VIEW_AUDIT)
        return apply_filters(events, self.request.query_params)


def _export_params(request):
    fmt = request.query_params.get("format", "jsonl")
    if fmt not in FORMATS:
        raise ValidationError({"format": f"Choose one of: {', '.join(FORMATS)}."})
    principal = Principal.from_request(request)
    if not principal.is_platform_admin and not any(
            has_perm(principal, t, Perm.EXPORT_AUDIT) for t in visible_tenants(principal)):
        # Without this a developer would get an empty "export" rather than being told no.
        raise PermissionDenied("Your role does not allow exporting the audit trail.")
    filters = {name: request.query_params[name] for name in FILTER_NAMES if request.query_params.get(name)}
    events = apply_filters(events_visible_to(principal, Perm.EXPORT_AUDIT), filters)
    return fmt, filters, events


class AuditExportView(APIView):
    """Stream the filtered trail as CSV or JSON Lines; nothing is built in memory."""

    @extend_schema(parameters=[OpenApiParameter("format", str, enum=list(FORMATS))] + FILTER_PARAMETERS,
                   responses={(200, "application/x-ndjson"): OpenApiTypes.BINARY,
                              (200, "text/csv"): OpenApiTypes.BINARY})
    def get(self, request):
        fmt, filters, events = _export_params(request)
        chunks, _ = stream_with_manifest(events, fmt, filters)
        response = StreamingHttpResponse(chunks, content_type=CONTENT_TYPES[fmt])
        response["Content-Disposition"] = f'attachment; filename="switchyard-audit.{fmt}"'
        return response


class AuditExportManifestView(APIView):
    """The signed manifest of the export with the same parameters (computed by streaming it).

    Each manifest names the previous one and the chain head, and its issue is recorded in the chain.
    """

    @extend_schema(parameters=[OpenApiParameter("format", str, enum=list(FORMATS))] + FILTER_PARAMETERS,
                   responses=ExportManifestSerializer)
    def get(self, request):
        fmt, filters, events = _export_params(request)
        chunks, builder = stream_with_manifest(events, fmt, filters)
        for _ in chunks:
            pass
        return Response(issue_manifest(builder, actor=Actor.from_request(request)))


def _verdict_response(verdict) -> Response:
    return Response(VerdictSerializer({"ok": verdict.ok, "checked": verdict.checked,
                                       "first_bad_seq": verdict.first_bad_seq, "reason": verdict.reason,
                                       "head_seq": verdict.head_seq, "anchors_checked": verdict.anchors_checked}).data)


class AuditVerifyView(APIView):
    """Platform admins: verify the whole chain now, and that it was not rolled back behind the witness or a manifest."""

    def _require_platform_admin(self, request):
        if not Principal.from_request(request).is_platform_admin:
            raise PermissionDenied("Only platform admins may verify the whole chain.")

    @extend_schema(responses={200: VerdictSerializer})
    def get(self, request):
        self._require_platform_admin(request)
        return _verdict_response(verify_trail())

    @extend_schema(request=VerifySinceManifestSerializer, responses={200: VerdictSerializer})
    def post(self, request):
        self._require_platform_admin(request)
        body = VerifySinceManifestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return _verdict_response(verify_trail(manifests=[body.validated_data["since_manifest"]]))
