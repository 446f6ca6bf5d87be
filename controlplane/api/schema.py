"""OpenAPI: every operation documents the errors it really answers, each with the DRF error body.

The rules follow what the views and controlplane/api/exceptions.py do, so no view has to list them:

- 401 and 403 on every operation (no or a bad key; a key without an admin scope, or a role that may not);
- 404 where something is looked up: a path id or slug, a page or cursor, the `?tenant=` of the
  cross-tenant reads (usage and cost);
- 400 where input is read: a request body, query parameters beyond paging, or django-filter filters
  (which also apply to a detail lookup);
- 415 where a request body is read (a content type no parser accepts);
- 409 on creates: they check uniqueness, then insert, so a concurrent create of the same record can win.

A view adds what only it knows (a 409, or a 400 from a bodiless state change) with `extend_schema`
and the ready-made responses below.
"""
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse

from controlplane.api.viewsets import CrossTenantReadMixin

ERROR_REF = {"$ref": "#/components/schemas/Error"}
VALIDATION_ERROR_REF = {"$ref": "#/components/schemas/ValidationError"}
BAD_REQUEST_SCHEMA = {"oneOf": [VALIDATION_ERROR_REF, ERROR_REF]}

ERROR_COMPONENT = {
    "type": "object",
    "description": "Every error other than invalid fields: one human-readable sentence.",
    "properties": {"detail": {"type": "string"},
                   "request_id": {"type": "string", "description": "Only on a 500: quote it when reporting."}},
    "required": ["detail"],
}
VALIDATION_ERROR_COMPONENT = {
    "type": "object",
    "description": "Invalid input: each offending field (or `non_field_errors`) with its messages; a list or "
                   "dict field nests its items' errors under their index or key.",
    "additionalProperties": {"oneOf": [
        {"type": "array", "items": {"oneOf": [{"type": "string"}, {"type": "object"}]}},
        {"type": "object"},
    ]},
    "minProperties": 1,
    "example": {"name": ["This field is required."]},
}

DESCRIPTIONS = {
    "400": "Invalid input: the fields at fault and why, or `detail` for a body that is not valid JSON.",
    "401": "No credentials, or a malformed, unknown, expired or revoked API key.",
    "403": "Authenticated, but the key's scopes or the caller's role do not allow this.",
    "404": "No such object (or one in a tenant the caller cannot see), or no such page or cursor.",
    "409": "Conflicts with the current state.",
    "415": "The request body's content type is not one the operation accepts.",
}
DEFAULT_DESCRIPTIONS = {"409": f"{DESCRIPTIONS['409']} A concurrent request created the same record first."}
PAGING = {"page", "page_size", "cursor"}

BAD_REQUEST = OpenApiResponse(BAD_REQUEST_SCHEMA, description=DESCRIPTIONS["400"])


def conflict(why: str) -> OpenApiResponse:
    """A documented 409, saying when it happens."""
    return OpenApiResponse(ERROR_REF, description=f"{DESCRIPTIONS['409']} {why}")


class SwitchyardAutoSchema(AutoSchema):
    def get_operation(self, *args, **kwargs):
        operation = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        responses = operation.setdefault("responses", {})
        for code in self._error_codes(operation):
            schema = BAD_REQUEST_SCHEMA if code == "400" else ERROR_REF
            responses.setdefault(code, {"content": {"application/json": {"schema": schema}},
                                        "description": DEFAULT_DESCRIPTIONS.get(code, DESCRIPTIONS[code])})
        operation["responses"] = dict(sorted(responses.items()))
        return operation

    def _error_codes(self, operation: dict) -> list[str]:
        parameters = operation.get("parameters", [])
        in_path = any(p["in"] == "path" for p in parameters)
        query = {p["name"] for p in parameters if p["in"] == "query"}
        has_body = "requestBody" in operation
        codes = ["401", "403"]
        if in_path or query & PAGING or isinstance(self.view, CrossTenantReadMixin):
            codes.append("404")
        if has_body or query - PAGING or self._filters():
            codes.append("400")
        if has_body:
            codes.append("415")
        if self._is_create_operation():
            codes.append("409")
        return codes

    def _filters(self) -> bool:
        view = self.view
        return bool(self.get_filter_backends()) and bool(
            getattr(view, "filterset_fields", None) or getattr(view, "filterset_class", None))


def add_error_components(result, generator, request, public):
    """Postprocessing hook: the two error bodies every operation refers to."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = ERROR_COMPONENT
    schemas["ValidationError"] = VALIDATION_ERROR_COMPONENT
    return result
