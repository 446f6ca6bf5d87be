"""Cross-cutting HTTP middleware: request ids, security headers and static files."""
import functools

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from whitenoise.middleware import WhiteNoiseMiddleware

from controlplane.request_context import client_ip, new_request_id, request_id_var, source_ip_var

# No 'unsafe-inline' anywhere: every script and style is a file served by us.
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])


class RequestIdMiddleware:
    """Gives every request an id (echoed as X-Request-ID) and records the source IP."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.request_id = new_request_id(request.META.get("HTTP_X_REQUEST_ID"))
        id_token = request_id_var.set(request.request_id)
        ip_token = source_ip_var.set(client_ip(request.META))
        try:
            response = self.get_response(request)
        finally:
            request_id_var.reset(id_token)
            source_ip_var.reset(ip_token)
        response["X-Request-ID"] = request.request_id
        return response


def _sso_origins() -> tuple[str, ...]:
    """The origins of the configured identity providers (docs/sso.md): signing out of the console
    redirects the sign-out form to the provider's logout, which `form-action 'self'` alone would block."""
    from urllib.parse import urlsplit

    from django.conf import settings

    issuers = (fields["issuer"] for fields in getattr(settings, "SWITCHYARD_OIDC_PROVIDERS", {}).values())
    return tuple(sorted({f"{u.scheme}://{u.netloc}" for u in map(urlsplit, issuers) if u.scheme and u.netloc}))


@functools.lru_cache(maxsize=8)
def _policy(sso_origins: tuple[str, ...]) -> str:
    if not sso_origins:
        return CONTENT_SECURITY_POLICY
    return CONTENT_SECURITY_POLICY.replace("form-action 'self'", "form-action 'self' " + " ".join(sso_origins))


class ContentSecurityPolicyMiddleware:
    """Adds a strict Content-Security-Policy to every response."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", _policy(_sso_origins()))
        return response


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise over STATIC_ROOT (`manage.py collectstatic`): hashed names cached for ever, gzip when
    accepted, ETags and ranges; served inside the security headers, before sessions and CSRF.

    Under ASGI a file is read a block at a time in a worker thread as it is sent: Django would otherwise
    read a file response whole into memory before sending it, warning on every new process.
    """

    BLOCK_SIZE = 64 * 1024

    def serve(self, static_file, request):
        response = super().serve(static_file, request)
        if isinstance(request, ASGIRequest):
            response.block_size = self.BLOCK_SIZE
            response.streaming_content = _read_in_thread(iter(response.streaming_content))
        return response


async def _read_in_thread(blocks):
    read = sync_to_async(next, thread_sensitive=False)
    while (block := await read(blocks, None)) is not None:
        yield block
