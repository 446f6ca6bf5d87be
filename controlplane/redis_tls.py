"""TLS to Redis (`rediss://`): one URL, with redis-py's parameter names, configures every client.

redis-py (Django's cache, the change bus, the gateway's subscriber) and the gateway's own client
(gateway/clients/pipelined_redis.py) read `ssl_ca_certs`, `ssl_certfile`, `ssl_keyfile`,
`ssl_cert_reqs` and `ssl_check_hostname` from the URL themselves. kombu (Celery's broker) does not:
without options it connects over TLS *without checking the certificate*, so settings hand it these.
"""
from __future__ import annotations

import ssl
from urllib.parse import parse_qsl, urlsplit

CERT_REQS = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}
FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


def broker_ssl_options(url: str) -> dict | None:
    """Celery's `broker_use_ssl` for a rediss:// URL (None for plain redis://): the server is verified
    unless the URL says `ssl_cert_reqs=none`."""
    parts = urlsplit(url)
    if parts.scheme != "rediss":
        return None
    query = dict(parse_qsl(parts.query))
    reqs = query.get("ssl_cert_reqs", "required").lower().removeprefix("cert_")
    if reqs not in CERT_REQS:
        raise ValueError(f"REDIS_URL: ssl_cert_reqs must be one of {', '.join(CERT_REQS)}, not {reqs!r}")
    return {"ssl_cert_reqs": CERT_REQS[reqs], **{name: query[name] for name in FILES if query.get(name)}}
