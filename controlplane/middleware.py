"""Cross-cutting HTTP middleware: request ids and security headers."""
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


class ContentSecurityPolicyMiddleware:
    """Adds a strict Content-Security-Policy to every response."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response
