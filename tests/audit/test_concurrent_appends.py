"""Writers appending at the same moment queue on the chain head: no gap, no fork, the chain verifies."""
import threading

from django.core.management import call_command
from django.db import connection

from audit.actor import Actor
from audit.models import AuditChainHead, AuditEvent
from audit.services import record_event

THREADS = 6
EVENTS_PER_THREAD = 8


def _append_many(barrier: threading.Barrier, worker: int, errors: list) -> None:
    try:
        barrier.wait(timeout=30)
        for n in range(EVENTS_PER_THREAD):
            record_event(actor=Actor.system(f"worker-{worker}"), action="test.concurrent", after={"n": n})
    except Exception as exc:  # reported by the test thread; a thread's exception is otherwise lost
        errors.append(exc)
    finally:
        connection.close()


# Threads need committed rows: a transactional test.
def test_concurrent_appends_keep_the_chain_contiguous_and_valid(audit_head):
    start = AuditChainHead.objects.get(pk=1).seq
    barrier, errors = threading.Barrier(THREADS), []
    threads = [threading.Thread(target=_append_many, args=(barrier, i, errors)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == [] and not any(t.is_alive() for t in threads)
    seqs = list(AuditEvent.objects.filter(seq__gt=start).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(start + 1, start + 1 + THREADS * EVENTS_PER_THREAD))
    labels = AuditEvent.objects.filter(action="test.concurrent").values_list("actor_label", flat=True)
    assert sorted(set(labels)) == [f"worker-{i}" for i in range(THREADS)]
    assert AuditChainHead.objects.get(pk=1).seq == seqs[-1]
    call_command("audit_verify")
