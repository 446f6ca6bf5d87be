"""The gateway's pure building blocks: redaction, routing policies, atomic limits.

Nothing here imports Django: the hot path is a lean ASGI application (see
`/work/shared/notes/gateway-hot-path.md`) that only loads its snapshot through Django.
"""
