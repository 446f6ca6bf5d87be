"""CLI: `python -m gateway --port 8001 [--workers N]` — the /v1 gateway as its own process(es)."""
from __future__ import annotations

import argparse
import os


def build_parser() -> argparse.ArgumentParser:
    from controlplane.env import env_int

    parser = argparse.ArgumentParser(prog="python -m gateway", description="Switchyard's OpenAI-compatible gateway.")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8001, help="TCP port (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=env_int("SWITCHYARD_GATEWAY_WORKERS", 1, minimum=1, maximum=64),
                        help="worker processes sharing the port (default: SWITCHYARD_GATEWAY_WORKERS or 1; "
                             "one per core is the usual choice)")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default: %(default)s)")
    return parser


def main(argv=None) -> None:
    """Serve with uvicorn (uvloop, httptools, no access log); several workers share one socket.

    Every worker is a whole gateway (its own snapshot, key cache, upstream pools and usage
    writer); limits and budgets stay exact across them because they are counted in Redis.
    """
    import uvicorn

    from gateway.corked import CorkedHttpToolsProtocol

    args = build_parser().parse_args(argv)
    if args.workers < 1:
        raise SystemExit("--workers must be at least 1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    # No proxy-headers middleware (nothing reads the client address; it is a wrapper per request)
    # and no Server header; the backlog absorbs bursts of new connections.
    options = dict(host=args.host, port=args.port, log_level=args.log_level, access_log=False, lifespan="on",
                   loop="uvloop", http=CorkedHttpToolsProtocol, proxy_headers=False, server_header=False, backlog=4096)
    if args.workers > 1:  # each worker imports gateway.asgi, which sets Django up and builds its app
        uvicorn.run("gateway.asgi:application", workers=args.workers, **options)
        return
    import django

    django.setup()
    from gateway.app import build_app

    uvicorn.run(build_app(), **options)


if __name__ == "__main__":
    main()
