"""DRF errors as JSON, Django ValidationErrors as 400s, and denied permissions audited."""
import logging

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions
from rest_framework.views import exception_handler as drf_exception_handler

logger = logging.getLogger(__name__)


def exception_handler(exc, context):
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(_detail(exc))
    if isinstance(exc, RecursionError) and "JSON" in str(exc):
        # json.loads gives up on very deep nesting with a RecursionError, which DRF's parser
        # does not catch; it is a malformed body, not a server error.
        exc = exceptions.ParseError("JSON parse error - the body is nested too deeply.")
    if isinstance(exc, exceptions.PermissionDenied):
        _audit_denial(context.get("request"), exc)
    return drf_exception_handler(exc, context)


def _detail(exc: DjangoValidationError):
    if hasattr(exc, "error_dict"):
        return exc.message_dict
    return {"non_field_errors": exc.messages}


def _audit_denial(request, exc) -> None:
    from audit.actor import Actor
    from audit.services import record_event

    if request is None:
        return
    try:
        record_event(actor=Actor.from_request(request), action="auth.permission_denied",
                     after={"method": request.method, "path": request.path[:300], "detail": str(exc.detail)[:300]})
    except Exception:  # an audit failure must not turn a 403 into a 500
        logger.exception("could not audit a permission denial")
