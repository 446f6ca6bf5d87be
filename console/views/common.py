"""What every console view shares: running a service with a readable error, and flash messages."""
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db import IntegrityError
from rest_framework.exceptions import ValidationError as ApiValidationError

from fleet.states import InvalidTransition


def error_text(exc: Exception) -> str:
    """One sentence out of a ValidationError (field: message; …)."""
    if isinstance(exc, ValidationError) and hasattr(exc, "message_dict"):
        return "; ".join(f"{'' if f == '__all__' else f + ': '}{' '.join(m)}" for f, m in exc.message_dict.items())
    if isinstance(exc, ValidationError):
        return " ".join(exc.messages)
    if isinstance(exc, ApiValidationError):
        detail = exc.detail
        return "; ".join(f"{k}: {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in detail.items()) \
            if isinstance(detail, dict) else str(detail)
    return str(exc)


def run_service(request, call, success: str = ""):
    """Call a service; on a validation problem flash it and return None instead of failing."""
    try:
        result = call()
    except (ValidationError, ApiValidationError, InvalidTransition, IntegrityError) as exc:
        messages.error(request, error_text(exc) if not isinstance(exc, IntegrityError)
                       else "That conflicts with an existing record.")
        return None
    if success:
        messages.success(request, success)
    return result


def form_errors(request, form) -> None:
    """Flash a form's errors (the page re-renders with them next to the fields as well)."""
    for field, errors in form.errors.items():
        label = form.fields[field].label if field in form.fields else ""
        messages.error(request, f"{label + ': ' if label else ''}{' '.join(errors)}")


def run_form_service(request, form, call, success: str):
    """Call a service for a bound, valid form; its validation errors land next to the form's fields.

    The page is then rendered again with the errors (the service validates, whoever calls it),
    so a duplicate or out-of-range value is a form error, never a 500.
    """
    try:
        result = call()
    except ValidationError as exc:
        for field, errors in (exc.message_dict if hasattr(exc, "message_dict") else {None: exc.messages}).items():
            form.add_error(field if field in form.fields else None, errors)
        return None
    except IntegrityError:  # a concurrent write got there first; the constraint held
        form.add_error(None, "That conflicts with a record saved a moment ago; reload and try again.")
        return None
    messages.success(request, success)
    return result
