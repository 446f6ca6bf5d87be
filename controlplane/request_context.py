"""Per-request facts (request id, source IP) that logs and audit rows carry.

Held in context variables so code far from the view (services, log filters) can read them
without threading the request object through every call.
"""
import ipaddress
import re
import uuid
from contextvars import ContextVar

from django.conf import settings

from gateway.pipeline.redaction import holds_secret

request_id_var: ContextVar[str] = ContextVar("request_id", default="")
source_ip_var: ContextVar[str | None] = ContextVar("source_ip", default=None)

_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def new_request_id(incoming: str | None) -> str:
    """Reuse a caller's request id when it is safe to log, else mint one.

    Safe: a short token of plain characters that is not a secret — every log line and audit row
    carries it, and an API key or access key id pasted into the header has that shape too.
    """
    if incoming and _SAFE_REQUEST_ID.match(incoming) and not holds_secret(incoming):
        return incoming
    return uuid.uuid4().hex


def client_ip(meta: dict) -> str | None:
    """The caller's address; X-Forwarded-For only when a trusted proxy sets it."""
    if settings.TRUST_X_FORWARDED_FOR:
        forwarded = meta.get("HTTP_X_FORWARDED_FOR", "")
        if forwarded:
            # Audit rows store it: an address, never whatever text the header held.
            address = _ip_address(forwarded.split(",")[0].strip())
            if address:
                return address
    return meta.get("REMOTE_ADDR") or None


def _ip_address(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None
