"""Switchyard's OpenAI-compatible `/v1` gateway: a lean ASGI application with its own HTTP server.

One sub-package per concern; docs/architecture.md says what every module holds. Requests never go
through Django (see `/work/shared/notes/gateway-hot-path.md`): the snapshot, keys and usage events
reach the database through the ORM in the gateway's database threads, off the request path.
"""
