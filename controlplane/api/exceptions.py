"""Every error of the REST API is DRF-shaped JSON: `{"detail": "…"}` or `{"field": ["…"]}`, never an HTML page.

Errors raised below the views are mapped by what they mean to the caller: the database refusing a value
the request carried (a NUL, an unpaired surrogate, a number out of range) is a 400; a row that exists
already or is still referenced is a 409; a missing row is a 404; a denied permission, from a view or a
service, is a 403 and audited. Anything else is a bug: logged with its traceback and answered as a JSON
500 naming the request id, so the caller can quote it.
"""
import logging

from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError, IntegrityError
from django.db.models import ProtectedError, RestrictedError
from django.http import JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from controlplane.request_context import request_id_var

logger = logging.getLogger(__name__)

UNSTORABLE = ("The request holds a value that cannot be stored: a NUL character, an unpaired surrogate "
              "or a number out of range.")
INTERNAL = "Internal server error; quote the request id when you report it."


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "This conflicts with the current state of the resource."
    default_code = "conflict"


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "payload_too_large"


def exception_handler(exc, context):
    exc = as_api_exception(exc)
    if isinstance(exc, exceptions.PermissionDenied):
        _audit_denial(context.get("request"), exc)
    response = drf_exception_handler(exc, context)
    if response is None:  # not an API error: a bug, never shown as a page or a stack trace
        logger.error("unhandled error in %s", _where(context), exc_info=(type(exc), exc, exc.__traceback__))
        set_rollback()  # as DRF does for the errors it handles: nothing half-done is committed
        response = Response({"detail": INTERNAL, "request_id": request_id_var.get()},
                            status=status.HTTP_500_INTERNAL_SERVER_ERROR)
    elif isinstance(exc, exceptions.ValidationError):
        response.data = validation_body(response.data)
    return response


def as_api_exception(exc):
    """The DRF exception a caller should see for `exc` (itself when it is one, or a bug)."""
    if isinstance(exc, exceptions.APIException):
        return exc
    if isinstance(exc, DjangoValidationError):
        return exceptions.ValidationError(_django_detail(exc))
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied(str(exc) or None)
    if isinstance(exc, ObjectDoesNotExist):
        return exceptions.NotFound()
    if isinstance(exc, (ProtectedError, RestrictedError)):
        return Conflict(_still_used_by(exc))
    if isinstance(exc, IntegrityError):
        # A concurrent write got there first (the serializers check uniqueness before writing).
        return Conflict("This conflicts with an existing record; reload and try again.")
    if isinstance(exc, (DataError, UnicodeEncodeError, OverflowError)):
        # PostgreSQL rejects NUL in text and json, psycopg cannot encode lone surrogates, SQLite
        # integers stop at 2**63: values a serializer let through, refused by the database.
        return exceptions.ValidationError({"non_field_errors": [UNSTORABLE]})
    if isinstance(exc, RecursionError):
        # json.loads gives up on very deep nesting with a RecursionError, which DRF's parser does not catch.
        return exceptions.ParseError("JSON parse error - the body is nested too deeply.")
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge()
    if isinstance(exc, SuspiciousOperation):
        return exceptions.ParseError("The request is malformed.")
    return exc


def validation_body(data):
    """`{"field": ["…"]}` always: a bare list becomes non_field_errors and a bare string a one-item list."""
    if isinstance(data, list):
        return {"non_field_errors": data}
    if isinstance(data, dict):
        return {name: [value] if isinstance(value, str) else value for name, value in data.items()}
    return data


def _django_detail(exc: DjangoValidationError):
    if hasattr(exc, "error_dict"):
        return exc.message_dict
    return {"non_field_errors": exc.messages}


def _still_used_by(exc) -> str:
    objects = getattr(exc, "protected_objects", None) or getattr(exc, "restricted_objects", None) or ()
    kinds = sorted({str(obj._meta.verbose_name_plural) for obj in objects})
    return f"Still in use by {', '.join(kinds) or 'other records'}; remove those first."


def _where(context) -> str:
    request = context.get("request")
    return f"{request.method} {request.path}" if request is not None else "an API view"


def storable(text: str, limit: int = 300) -> str:
    """`text` cut to `limit` with NUL and unpaired surrogates escaped: an audit row must store whatever was sent."""
    return text[:limit].replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def _audit_denial(request, exc) -> None:
    from audit.actor import Actor
    from audit.services import record_event

    if request is None:
        return
    try:
        record_event(actor=Actor.from_request(request), action="auth.permission_denied",
                     after={"method": request.method, "path": storable(request.path),
                            "detail": storable(str(exc.detail))})
    except Exception:  # an audit failure must not turn a 403 into a 500
        logger.exception("could not audit a permission denial")


# Django's own error pages, for requests that never reach a DRF view (no route, a rejected Host header,
# a crash in middleware): JSON under /api/, the usual pages elsewhere. Wired in controlplane/urls.py.

def _is_api(request) -> bool:
    return request.path.startswith("/api/")


def bad_request(request, exception):
    if _is_api(request):
        return JsonResponse({"detail": "Bad request."}, status=400)
    return defaults.bad_request(request, exception)


def page_not_found(request, exception):
    if _is_api(request):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request):
    if _is_api(request):
        return JsonResponse({"detail": INTERNAL, "request_id": request_id_var.get()}, status=500)
    return defaults.server_error(request)
