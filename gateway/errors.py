"""Errors in OpenAI's shape, `{"error": {"message", "type", "code"}}` (see docs/errors.md)."""
from __future__ import annotations

import json

# error.type by HTTP status, the strings OpenAI's API and clients use.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    410: "superseded",  # only a superseded editor completion (gateway/pipeline/supersede.py)
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "server_error",
    504: "server_error",
}


class GatewayError(Exception):
    """A request the gateway answers itself, with a status, a stable code and extra headers."""

    def __init__(self, status: int, code: str, message: str, headers: list | None = None, *,
                 param: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or []
        self.param = param

    def body(self) -> bytes:
        """The JSON body a client sees."""
        return error_body(self.status, self.code, self.message, self.param)


def error_body(status: int, code: str, message: str, param: str | None = None) -> bytes:
    """Encode one error object."""
    error = {"message": message, "type": error_type(status), "param": param, "code": code}
    return json.dumps({"error": error}, separators=(",", ":")).encode()


def error_type(status: int) -> str:
    """OpenAI's error.type for a status: the table's, else by class (4xx the client's, 5xx ours)."""
    return ERROR_TYPES.get(status) or ("invalid_request_error" if status < 500 else "server_error")


def sse_error_event(status: int, code: str, message: str) -> bytes:
    """An error sent inside an SSE stream after the 200 went out, followed by the terminator."""
    return b"data: " + error_body(status, code, message) + b"\n\ndata: [DONE]\n\n"


# The errors with fixed wording, so the table in docs/errors.md and the code cannot drift.
def invalid_key() -> GatewayError:
    return GatewayError(401, "invalid_api_key", "Incorrect API key provided.")


def missing_key() -> GatewayError:
    return GatewayError(401, "missing_api_key", "Send your API key as 'Authorization: Bearer <key>'.")


def revoked_key() -> GatewayError:
    return GatewayError(401, "api_key_revoked", "This API key has been revoked.")


def expired_key() -> GatewayError:
    return GatewayError(401, "api_key_expired", "This API key has expired.")


def scope_missing() -> GatewayError:
    return GatewayError(403, "scope_missing", "This API key lacks the 'inference' scope.")


def tenant_suspended() -> GatewayError:
    return GatewayError(403, "tenant_suspended", "This tenant is suspended.")


def model_not_allowed(model: str) -> GatewayError:
    return GatewayError(403, "model_not_allowed", f"This API key may not use the model '{model}'.")


def model_not_found(model: str) -> GatewayError:
    return GatewayError(404, "model_not_found", f"The model '{model}' does not exist.")


def body_too_large(limit: int) -> GatewayError:
    return GatewayError(413, "request_too_large", f"The request body exceeds {limit} bytes.")


def bad_request(code: str, message: str) -> GatewayError:
    return GatewayError(400, code, message)


def no_capacity(model: str) -> GatewayError:
    return GatewayError(503, "no_capacity", f"No healthy instance is serving '{model}' right now.")


def upstream_timeout() -> GatewayError:
    return GatewayError(504, "upstream_timeout", "The model server did not answer in time.")


def upstream_failed() -> GatewayError:
    return GatewayError(502, "upstream_error", "The model server failed; please retry.")


def queue_full(scope: str) -> GatewayError:
    whose = "your tenant's" if scope == "tenant" else "the model's"
    return GatewayError(429, "queue_full", f"The model is at capacity and {whose} queue is full; retry shortly.",
                        [(b"retry-after", b"1")])


def queue_timeout(model: str) -> GatewayError:
    return GatewayError(503, "queue_timeout", f"'{model}' stayed at capacity while the request waited; retry later.",
                        [(b"retry-after", b"1")])


def database_unavailable() -> GatewayError:
    return GatewayError(503, "service_unavailable",
                        "The gateway cannot reach its database to answer this request right now; retry shortly.",
                        [(b"retry-after", b"2")])


def redis_not_configured() -> GatewayError:
    """No Redis at all: limits and budgets cannot be kept, so nothing is admitted (docs/gateway.md)."""
    return GatewayError(503, "redis_not_configured",
                        "This gateway has no Redis configured (SWITCHYARD_GATEWAY_REDIS_URL or REDIS_URL), so it "
                        "cannot keep limits and budgets and refuses inference requests.")
