"""CLI: `python -m gateway --port 8001` — the /v1 gateway as its own process."""
from __future__ import annotations

import argparse
import os


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gateway", description="Switchyard's OpenAI-compatible gateway.")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8001, help="TCP port (default: %(default)s)")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default: %(default)s)")
    return parser


def main(argv=None) -> None:
    """Set Django up once, then serve with uvicorn (uvloop, httptools, no access log)."""
    import django
    import uvicorn

    args = build_parser().parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    django.setup()
    from gateway.app import build_app

    # No proxy-headers middleware (nothing reads the client address; it is a wrapper per request)
    # and no Server header; the backlog absorbs bursts of new connections.
    uvicorn.run(build_app(), host=args.host, port=args.port, log_level=args.log_level, access_log=False,
                lifespan="on", loop="uvloop", http="httptools", proxy_headers=False, server_header=False,
                backlog=4096)


if __name__ == "__main__":
    main()
