"""The embedded broker (kombu's filesystem transport, controlplane/broker.py) never hands out half a message.

Stock kombu creates a message file and then writes it, and a consumer may take the file in between:
it reads nothing, the JSON error kills its connection and the worker stops taking tasks. It also
creates an exchange's binding table with a truncating open before locking it, so a second producer
binding at once read an empty table and its publish died (seen in CI: one producer's 1,000 messages
never sent). Producers and a consumer polling as fast as it can must move every message intact.
"""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from django.conf import settings
from kombu import Connection

from bench._procs import REPO_ROOT
from bench._run_stack import embedded_env, stack_processes

MESSAGES = 1000


def test_concurrent_producers_and_a_fast_consumer_lose_and_break_nothing(tmp_path):
    if settings.CELERY_BROKER_URL == "filesystem://":  # the embedded default uses this transport
        assert settings.CELERY_BROKER_TRANSPORT == "controlplane.broker:Transport"
    options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path),
               "control_folder": str(tmp_path / "control"), "polling_interval": 0.001}
    received, errors = [], []

    def connection():
        return Connection("filesystem://", transport="controlplane.broker:Transport", transport_options=options)

    def produce(worker):
        try:
            with connection() as conn:
                queue = conn.SimpleQueue("race")
                for n in range(MESSAGES):
                    queue.put({"worker": worker, "n": n})
        except Exception as exc:
            errors.append(exc)

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


def test_queues_bound_at_once_are_all_in_the_exchange_table(tmp_path):
    """Every binding made concurrently to one exchange lands in its table, and no bind raises."""
    from controlplane.broker import Transport

    for attempt in range(20):
        control = tmp_path / f"control-{attempt}"
        options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path),
                   "control_folder": str(control)}
        errors, start = [], threading.Barrier(8)

        def bind(n, options=options, start=start, errors=errors):
            with Connection("filesystem://", transport=Transport, transport_options=options) as conn:
                channel = conn.default_channel
                start.wait()
                try:
                    channel._queue_bind("fanout-x", f"key-{n}", "", f"queue-{n}")
                except Exception as exc:
                    errors.append(exc)

        threads = [threading.Thread(target=bind, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        with Connection("filesystem://", transport=Transport, transport_options=options) as conn:
            table = conn.default_channel.get_table("fanout-x")
        assert errors == []
        assert sorted(q.queue for q in table) == [f"queue-{n}" for n in range(8)]


def test_a_fanout_message_reaches_each_bound_queue_once(tmp_path):
    """The bindings this process made and those in the file are one table, not two."""
    from kombu import Exchange, Queue

    options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path),
               "control_folder": str(tmp_path / "control")}
    with Connection("filesystem://", transport="controlplane.broker:Transport", transport_options=options) as conn:
        exchange = Exchange("broadcast", type="fanout")
        queues = [Queue(f"listener-{n}", exchange)(conn.default_channel) for n in range(2)]
        for queue in queues:
            queue.declare()
        conn.Producer().publish({"hello": 1}, exchange=exchange, declare=[exchange])
        assert [queue.get() is not None for queue in queues] == [True, True]
        assert [queue.get() for queue in queues] == [None, None]


@pytest.mark.slow
def test_a_worker_takes_tasks_in_its_event_loop_and_a_group_sigterm_ends_it(tmp_path):
    """A worker with embedded beat takes beat's tasks; a SIGTERM to its whole process group ends it by
    itself (exit 0), nothing of it left.

    Stock kombu declares the filesystem transport blocking, so the worker ran its blocking loop and a
    thread-driven pool: a group SIGTERM killed a pool process holding the pool's queue lock and the
    worker waited for that lock forever (2 of 3 stops). The deadline below is for "it stopped at all".
    """
    env = embedded_env(tmp_path)
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO_ROOT, env=env,
                   check=True)
    for attempt in range(3):
        log = tmp_path / f"worker-{attempt}.log"
        with open(log, "wb") as out:
            worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "controlplane", "worker", "-B",
                                       "--concurrency", "2", "-l", "info"], cwd=REPO_ROOT, env=env, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_for_text(log, "] succeeded in", worker)  # fleet.health_check, sent by beat at start
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                code = worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                code = None
            left = stack_processes(tmp_path)
        finally:
            for pid in stack_processes(tmp_path):
                os.kill(pid, signal.SIGKILL)
            worker.kill()  # a no-op once it has exited
            worker.wait()
        assert code == 0, log.read_text()[-3000:]
        assert left == {}


def _wait_for_text(log, text: str, proc, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
