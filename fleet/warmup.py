"""A warm-up request to an engine that just became ready, so that no user's request is the first it serves.

A freshly started vLLM engine serves its first request much slower than the next ones (docs/autoscaling.md,
"Measured"). A warm instance is promoted exactly when latency matters — in a burst — so without this its
first routed request pays that cost. The request goes straight to the engine (no tenant, not metered:
a few tokens of the fleet's own), once, when the health pass sees the instance become ready.
Observation only: nothing is written; the task's result says how it went.
"""
import time

import httpx
from django.conf import settings

from fleet.models import Instance
from fleet.states import InstanceState

PROMPT = "def warm_up(items):\n    return"
MAX_TOKENS = 8


def warm_up_body(model_name: str) -> dict:
    return {"model": model_name, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0}


def warm_up(instance_id: int) -> dict:
    """Send the warm-up request to a ready instance's engine; what happened, for the task result."""
    instance = (Instance.objects.select_related("deployment__model_version__model", "model_version__model")
                .filter(pk=instance_id, state=InstanceState.READY).first())
    if instance is None or not instance.endpoint_url:
        return {"instance": instance_id, "skipped": "not ready"}
    started = time.monotonic()
    try:
        with httpx.Client(timeout=settings.SWITCHYARD_FLEET_WARM_UP_TIMEOUT_SECONDS) as client:
            answer = client.post(instance.endpoint_url.rstrip("/") + "/v1/completions",
                                 json=warm_up_body(instance.version.model.name))
    except httpx.HTTPError as exc:
        return {"instance": instance_id, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"instance": instance_id, "ok": answer.status_code == 200, "status": answer.status_code,
            "seconds": round(time.monotonic() - started, 3)}
