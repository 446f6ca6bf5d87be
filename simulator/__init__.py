"""Simulated vLLM engine: an OpenAI-compatible ASGI server modelling a paged KV cache."""

from .config import SimulatorConfig

__all__ = ["SimulatorConfig", "build_app"]


def build_app(config=None):
    """Lazy re-export of :func:`simulator.app.build_app`."""
    from .app import build_app as _build_app

    return _build_app(config)
