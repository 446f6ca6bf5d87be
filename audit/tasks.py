"""Periodic audit tasks."""
import logging

from celery import shared_task

from audit.verify import verify_chain

logger = logging.getLogger(__name__)


@shared_task(name="audit.verify_chain", time_limit=1800, soft_time_limit=1700)
def verify_chain_task() -> dict:
    """Verify the whole chain; a broken chain is logged at ERROR for alerting."""
    verdict = verify_chain()
    if not verdict.ok:
        logger.error("audit chain broken at seq %s: %s", verdict.first_bad_seq, verdict.reason)
    return {"ok": verdict.ok, "checked": verdict.checked, "first_bad_seq": verdict.first_bad_seq}
