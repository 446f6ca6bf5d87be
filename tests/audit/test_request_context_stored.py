"""What the control plane keeps of a request's headers: its id and source address, in every log
line and audit row — never a secret that a caller put there."""
import logging

import pytest
from django.http import HttpResponse
from django.test import RequestFactory
from django.test.utils import override_settings

from audit.models import AuditEvent
from controlplane.logging import JsonFormatter, RequestIdFilter
from controlplane.middleware import RequestIdMiddleware
from tests.conftest import bearer

SECRETS = ["sy_live_Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5hJ", "AKIAQ3EGRTX5ZBN7W4KD",
           "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.c2lnbmF0dXJlLXZhbHVlLTEyMw",
           "ghp_Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Jh0Gf9EdCbA1234"]


def update_tenant(alice, **headers):
    response = bearer(alice.key).patch(f"/api/v1/tenants/{alice.tenant.slug}/", {"redaction_mode": "block"},
                                       format="json", **headers)
    assert response.status_code == 200, response.content
    return response, AuditEvent.objects.filter(action="tenant.update").latest("seq")


def test_a_callers_plain_request_id_is_kept(alice):
    response, event = update_tenant(alice, HTTP_X_REQUEST_ID="trace-42.a:b")
    assert response["X-Request-ID"] == event.request_id == "trace-42.a:b"


class Lines(logging.Handler):
    """Log lines as the control plane writes them (JSON, stamped with the request id)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.addFilter(RequestIdFilter())
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(self.format(record))


@pytest.mark.parametrize("secret", SECRETS, ids=["switchyard", "aws", "jwt", "github"])
def test_a_secret_sent_as_request_id_is_replaced_before_any_log_or_audit_row(alice, secret):
    response, event = update_tenant(alice, HTTP_X_REQUEST_ID=secret)
    assert response["X-Request-ID"] == event.request_id != secret and len(event.request_id) == 32
    handler, root = Lines(), logging.getLogger()
    root.addHandler(handler)
    try:  # a view that logs, behind the real middleware: its line carries the request's id
        view = RequestIdMiddleware(lambda request: logging.getLogger("tests").warning("in the view") or HttpResponse())
        answer = view(RequestFactory().get("/api/v1/", HTTP_X_REQUEST_ID=secret))
    finally:
        root.removeHandler(handler)
    assert answer["X-Request-ID"] != secret and any(answer["X-Request-ID"] in line for line in handler.lines)
    assert not [line for line in handler.lines if secret in line]


@override_settings(TRUST_X_FORWARDED_FOR=True)
def test_a_forwarded_for_that_is_not_an_address_is_not_stored(alice):
    # The addresses are header and REMOTE_ADDR values of Django's in-process test client: no traffic leaves.
    _, event = update_tenant(alice, HTTP_X_FORWARDED_FOR=f"{SECRETS[0]}, 10.0.0.1", REMOTE_ADDR="10.0.0.9")
    assert event.source_ip == "10.0.0.9"
    _, event = update_tenant(alice, HTTP_X_FORWARDED_FOR="2001:db8::1, 10.0.0.1", REMOTE_ADDR="10.0.0.9")
    assert event.source_ip == "2001:db8::1"
