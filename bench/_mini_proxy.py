"""A minimal forwarding proxy whose only variable is the upstream HTTP client.

Clients: `aiohttp`, `httpx`, or `lean` (the gateway's own, gateway/clients/engine.py).

    python -m bench._mini_proxy --port 9000 --upstream http://127.0.0.1:8001 --client httpx

A plain ASGI callable under the gateway's HTTP server (gateway/server/: uvloop, httptools): read the body, parse
the JSON once, POST it upstream with one shared client, relay status and body. No auth, limits or metering:
it isolates the client library's cost, as in /work/shared/notes/gateway-hot-path.md.
"""
from __future__ import annotations

import argparse
import json


def build_app(upstream: str, client_name: str):
    state: dict = {}

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            await _lifespan(receive, send, state, client_name)
            return
        if scope["method"] != "POST":  # readiness probe
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        payload = json.loads(b"".join(chunks))
        status, body = await state["post"](upstream + scope["path"], payload)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    return app


async def _lifespan(receive, send, state: dict, client_name: str) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            state["post"], state["close"] = _client(client_name)
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await state["close"]()
            await send({"type": "lifespan.shutdown.complete"})
            return


def _client(name: str):
    if name == "lean":
        from gateway.clients.engine import UpstreamClient

        lean = UpstreamClient(connect_timeout=5)

        async def post(url, payload):
            response = await lean.post(url, json.dumps(payload).encode(), ((b"content-type", b"application/json"),))
            try:
                return response.status, await response.read()
            finally:
                response.close()
        return post, lean.close
    if name == "aiohttp":
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

        async def post(url, payload):
            async with session.post(url, json=payload) as response:
                return response.status, await response.read()
        return post, session.close
    import httpx

    client = httpx.AsyncClient(limits=httpx.Limits(max_connections=None, max_keepalive_connections=256))

    async def post(url, payload):
        response = await client.post(url, json=payload)
        return response.status_code, response.content
    return post, client.aclose


def main(argv=None) -> None:
    from gateway.server import HttpServer

    parser = argparse.ArgumentParser(prog="python -m bench._mini_proxy")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--client", choices=("aiohttp", "httpx", "lean"), required=True)
    args = parser.parse_args(argv)
    HttpServer(build_app(args.upstream.rstrip("/"), args.client), host="127.0.0.1", port=args.port).run()


if __name__ == "__main__":
    main()
