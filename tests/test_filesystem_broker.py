"""The embedded broker (kombu's filesystem transport, controlplane/broker.py) never hands out half a message.

Stock kombu creates a message file and then writes it, and a consumer may take the file in between:
it reads nothing, the JSON error kills its connection and the worker stops taking tasks. Two
producers and a consumer polling as fast as it can must move every message intact.
"""
import threading

from django.conf import settings
from kombu import Connection

MESSAGES = 1000


def test_concurrent_producers_and_a_fast_consumer_lose_and_break_nothing(tmp_path):
    if settings.CELERY_BROKER_URL == "filesystem://":  # the embedded default uses this transport
        assert settings.CELERY_BROKER_TRANSPORT == "controlplane.broker:Transport"
    options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path), "polling_interval": 0.001}
    received, errors = [], []

    def connection():
        return Connection("filesystem://", transport="controlplane.broker:Transport", transport_options=options)

    def produce(worker):
        with connection() as conn:
            queue = conn.SimpleQueue("race")
            for n in range(MESSAGES):
                queue.put({"worker": worker, "n": n})

    def consume():
        with connection() as conn:
            queue = conn.SimpleQueue("race")
            while len(received) < 2 * MESSAGES and not errors:
                try:
                    message = queue.get(timeout=10)
                except queue.Empty:
                    return
                except Exception as exc:  # the stock transport fails here with a JSONDecodeError
                    errors.append(exc)
                    return
                received.append((message.payload["worker"], message.payload["n"]))
                message.ack()

    threads = [threading.Thread(target=produce, args=(w,)) for w in (0, 1)] + [threading.Thread(target=consume)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert sorted(received) == [(w, n) for w in (0, 1) for n in range(MESSAGES)]
