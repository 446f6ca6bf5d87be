"""Engine work: the unit by which an instance's busy time is shared between the requests it served."""
from django.conf import settings


def weights() -> tuple[float, float]:
    """(prefill weight per uncached prompt token, decode weight per completion token)."""
    return settings.SWITCHYARD_COST_PREFILL_WEIGHT, settings.SWITCHYARD_COST_DECODE_WEIGHT


def engine_work(prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> float:
    """w_prefill × (prompt − cached) + w_decode × completion; cached prompt tokens cost no prefill."""
    w_prefill, w_decode = weights()
    return w_prefill * max(prompt_tokens - cached_tokens, 0) + w_decode * completion_tokens
