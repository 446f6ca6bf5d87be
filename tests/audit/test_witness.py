"""The witness: every committed head reaches a file and/or an HTTP endpoint outside the database, off the request
path."""
import json
import os
import subprocess
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from django.db import transaction

from audit import witness
from audit.chain import head_message, sign
from audit.models import AuditChainHead, AuditEvent
from audit.services import record_event
from audit.tasks import witness_current_head_task, witness_head_task
from tests.audit.tampering import make_chain
from tests.factories import SYSTEM
from tests.processes import REPO_ROOT, free_port

pytestmark = pytest.mark.django_db


class _Recorder(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802  (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append(json.loads(body))
        self.send_response(self.server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def witness_server():
    """A loopback HTTP witness that keeps what it is sent; stopped at the end of the test."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.received, server.status = [], 204
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _heads() -> list[dict]:
    return [{"seq": e.seq, "hash": e.hash} for e in AuditEvent.objects.order_by("seq")]


def _signed(entry: dict) -> bool:
    return entry["signature"] == sign(head_message(entry["seq"], entry["hash"]))


def test_every_committed_append_is_witnessed_in_the_file(committed, settings, tmp_path):
    settings.SWITCHYARD_AUDIT_WITNESS_FILE = str(tmp_path / "witness.jsonl")
    committed(lambda: make_chain(5))
    entries = [json.loads(line) for line in (tmp_path / "witness.jsonl").read_text().splitlines()]
    assert [{"seq": e["seq"], "hash": e["hash"]} for e in entries] == _heads()
    assert all(_signed(e) and e["witnessed_at"].endswith("Z") for e in entries)


def test_every_committed_append_is_posted_to_the_endpoint(committed, settings, witness_server):
    settings.SWITCHYARD_AUDIT_WITNESS_URL = f"http://127.0.0.1:{witness_server.server_port}/heads"
    committed(lambda: make_chain(3))
    assert [{"seq": e["seq"], "hash": e["hash"]} for e in witness_server.received] == _heads()
    assert all(_signed(e) for e in witness_server.received)


def test_a_write_that_rolls_back_is_never_witnessed(committed, settings, tmp_path):
    settings.SWITCHYARD_AUDIT_WITNESS_FILE = str(tmp_path / "witness.jsonl")

    def fail_after_appending():
        with pytest.raises(RuntimeError), transaction.atomic():
            record_event(actor=SYSTEM, action="test.event")
            raise RuntimeError("the service fails after its audit event")
        record_event(actor=SYSTEM, action="test.event")
    committed(fail_after_appending)
    entries = [json.loads(line) for line in (tmp_path / "witness.jsonl").read_text().splitlines()]
    # the rolled-back row 1 was never sent; only the committed row 1 that replaced it
    assert [{"seq": e["seq"], "hash": e["hash"]} for e in entries] == _heads() and len(entries) == 1


def test_no_witness_configured_queues_nothing(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        make_chain(2)
    # Only the change bus's announcements (one per event: controlplane/change_bus.py), no witness task.
    assert [callback.__qualname__ for callback in callbacks] == ["_announce_on_commit.<locals>.<lambda>"] * 2


@pytest.mark.django_db(transaction=True)
def test_an_admin_write_answers_before_the_witness_is_contacted(audit_head, charlie, settings, witness_server,
                                                                 tmp_path):
    """The request only queues the witness task (real broker, a queue of its own); a worker delivers it later."""
    from rest_framework.test import APIClient

    from controlplane.celery import app

    settings.SWITCHYARD_AUDIT_WITNESS_URL = f"http://127.0.0.1:{witness_server.server_port}/heads"
    settings.SWITCHYARD_AUDIT_WITNESS_FILE = str(tmp_path / "witness.jsonl")
    queue, previous = f"audit-witness-test-{uuid.uuid4().hex[:8]}", app.conf.task_default_queue
    app.conf.task_default_queue = queue
    try:
        client = APIClient()
        client.force_login(charlie.user)  # signing in is itself an audited, witnessed write
        response = client.post("/api/v1/tenants/", {"slug": "witnessed", "name": "Witnessed",
                                                          "admin_email": "o@w.test"}, format="json")
        assert response.status_code == 201
        assert witness_server.received == [] and not (tmp_path / "witness.jsonl").exists()
        messages = _drain(app, queue)
    finally:
        app.conf.task_default_queue = previous
    assert {m["task"] for m in messages} == {"audit.witness_head"} and messages
    for message in messages:  # what a worker would do with them
        witness_head_task.apply(args=message["args"])
    head = AuditChainHead.objects.get(pk=1)
    assert witness_server.received[-1]["seq"] == head.seq and witness_server.received[-1]["hash"] == head.hash
    assert json.loads((tmp_path / "witness.jsonl").read_text().splitlines()[-1])["seq"] == head.seq


def _drain(app, queue: str) -> list[dict]:
    """Every message in `queue`, consumed: (task name, args) as the worker would read them."""
    found = []
    with app.connection_for_read() as connection:
        simple = connection.SimpleQueue(queue)
        try:
            while True:
                message = simple.get(timeout=2)
                args, _kwargs, _embed = message.decode()
                found.append({"task": message.headers["task"], "args": args})
                message.ack()
        except simple.Empty:
            pass
        finally:
            simple.queue.delete()
            simple.close()
    return found


def test_an_unreachable_witness_raises_so_the_task_retries(settings):
    settings.SWITCHYARD_AUDIT_WITNESS_URL = f"http://127.0.0.1:{free_port()}/heads"  # nothing listens there
    head = witness.SignedHead(1, "a" * 64, sign(head_message(1, "a" * 64)))
    with pytest.raises(httpx.ConnectError) as error:
        witness.send(head, "url")
    assert isinstance(error.value, witness_head_task.autoretry_for)


def test_a_witness_that_answers_an_error_is_retried_too(settings, witness_server):
    witness_server.status = 503
    settings.SWITCHYARD_AUDIT_WITNESS_URL = f"http://127.0.0.1:{witness_server.server_port}/heads"
    head = witness.SignedHead(1, "a" * 64, sign(head_message(1, "a" * 64)))
    with pytest.raises(httpx.HTTPStatusError) as error:
        witness.send(head, "url")
    assert isinstance(error.value, witness_head_task.autoretry_for)


def test_a_silent_witness_times_out(settings):
    """A witness that accepts the connection and never answers: the task gives up after the timeout and retries."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    try:
        settings.SWITCHYARD_AUDIT_WITNESS_URL = f"http://127.0.0.1:{listener.getsockname()[1]}/heads"
        settings.SWITCHYARD_AUDIT_WITNESS_TIMEOUT_SECONDS = 1
        with pytest.raises(httpx.TimeoutException):
            witness.send(witness.SignedHead(1, "a" * 64, "b" * 64), "url")
    finally:
        listener.close()


def test_the_beat_task_witnesses_the_current_head_once(eager_celery, settings, tmp_path):
    make_chain(3)  # not committed: their on-commit tasks never ran, as when the broker was down
    settings.SWITCHYARD_AUDIT_WITNESS_FILE = str(tmp_path / "witness.jsonl")
    assert witness_current_head_task()["witnessed"] == ["file"]
    assert witness_current_head_task()["witnessed"] == []  # already there
    (entry,) = [json.loads(line) for line in (tmp_path / "witness.jsonl").read_text().splitlines()]
    assert entry["seq"] == 3 and _signed(entry)


def test_an_unwritable_witness_file_raises_so_the_task_retries(settings, tmp_path):
    settings.SWITCHYARD_AUDIT_WITNESS_FILE = str(tmp_path / "missing-dir" / "witness.jsonl")
    with pytest.raises(OSError) as error:
        witness.send(witness.SignedHead(1, "a" * 64, "b" * 64), "file")
    assert isinstance(error.value, witness_head_task.autoretry_for)


@pytest.mark.parametrize("name,value", [("SWITCHYARD_AUDIT_WITNESS_URL", "ftp://example.test/x"),
                                        ("SWITCHYARD_AUDIT_WITNESS_TIMEOUT_SECONDS", "0")])
def test_a_bad_witness_setting_stops_start_up_naming_it(name, value):
    env = {**os.environ, name: value, "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and name in result.stderr
