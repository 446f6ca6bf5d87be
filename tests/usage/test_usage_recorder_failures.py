"""The gateway's usage writer never drops a batch: a refused row is split out and set aside, a
database that is away gets the batch spooled to disk, and spooled events are written once when it returns.

The writer here is the gateway's own (`write_batch` in the gateway's database threads, into the test
database); "the database is away" is a real connection attempt to a closed loopback port (psycopg's
own OperationalError). tests/gateway_app/test_usage_database_outage.py stops a real PostgreSQL.
"""
import asyncio
import json
import logging

import pytest

from bench._procs import free_port
from gateway.clients.database import DatabaseThreads
from gateway.metering.metrics import GatewayMetrics
from gateway.metering.recorder import RequestRecord, UsageRecorder, probe_database, write_batch
from gateway.metering.spool import DEAD_LETTER_NAME, DeadLetter, UsageSpool, encode_events
from usage.models import UsageEvent

pytestmark = pytest.mark.django_db(transaction=True)  # the writer's threads must see committed rows
SECRET_PROMPT = "def f(): return 'the prompt text itself'"


def _rows(tenant, count: int, prefix: str = "req") -> list[list]:
    return [RequestRecord(f"{prefix}-{i:04d}", "chat", tenant_id=tenant.pk, model_name="tiny-coder", status_code=200,
                          outcome="ok", redacted_prompt=SECRET_PROMPT).as_row() for i in range(count)]


class Database:
    """The gateway's writer and probe, with a switch: while `away`, each call really tries to connect to a
    port nothing listens on; once back, they are `write_batch` and `probe_database` themselves."""

    def __init__(self, away: bool = True):
        self.away, self._port = away, free_port()

    def write(self, batch) -> int:
        self._fail_if_away()
        return write_batch(batch)

    def probe(self) -> None:
        self._fail_if_away()
        probe_database()

    def _fail_if_away(self) -> None:
        import psycopg

        if self.away:
            psycopg.connect(host="127.0.0.1", port=self._port, connect_timeout=2).close()
            raise AssertionError("something listens on the closed port")


def _recorder(db, tmp_path, database: Database, **options) -> UsageRecorder:
    options.setdefault("spool", UsageSpool(tmp_path / "spool", 10 * 1024 * 1024))
    options.setdefault("dead_letter", DeadLetter(tmp_path / "spool" / DEAD_LETTER_NAME, 1024 * 1024))
    return UsageRecorder(database.write, run_in_thread=db.run, metrics=GatewayMetrics(), probe=database.probe,
                         **options)


def _record_and_flush(tmp_path, rows: list, database: "Database", **options) -> UsageRecorder:
    """A recorder that takes `rows` and flushes once (as its task does every second)."""
    async def main(db):
        recorder = _recorder(db, tmp_path, database, **options)
        for row in rows:
            recorder.record(row)
        await recorder.flush()
        return recorder
    return _run(main)


def _run(coroutine_function):
    """Run with the gateway's database threads, closed afterwards (their connections too)."""
    async def main():
        db = DatabaseThreads()
        try:
            return await coroutine_function(db)
        finally:
            await db.close()
    return asyncio.run(main())


def _stored_ids() -> list[str]:
    return sorted(UsageEvent.objects.values_list("request_id", flat=True))


def _counter(metrics: GatewayMetrics, name: str, **labels) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_row_the_database_refuses_is_set_aside_and_the_rest_of_its_batch_stored(tenant_a, tmp_path, caplog):
    rows = _rows(tenant_a, 64)
    rows[37][5] = object()  # no driver adapts it: the database refuses this row whatever else is in the batch

    with caplog.at_level(logging.INFO, logger="gateway.metering"):
        recorder = _record_and_flush(tmp_path, rows, Database(away=False), batch_size=64)
    assert _stored_ids() == sorted(f"req-{i:04d}" for i in range(64) if i != 37)
    assert (recorder.set_aside, recorder.lost) == (1, 0)
    assert _counter(recorder._metrics, "switchyard_gateway_usage_set_aside_total") == 1
    (line,) = (tmp_path / "spool" / DEAD_LETTER_NAME).read_text().splitlines()
    kept = json.loads(line)
    assert kept["event"]["request_id"] == "req-0037" and kept["error"]
    assert kept["event"]["redacted_prompt"] == SECRET_PROMPT  # the whole event, to replay once mended
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "req-0037" in logged and SECRET_PROMPT not in logged


def test_a_batch_written_while_the_database_is_away_is_spooled_then_written_once(tenant_a, tmp_path):
    database, rows = Database(), _rows(tenant_a, 30)

    async def main(db):
        recorder = _recorder(db, tmp_path, database, batch_size=10)
        for row in rows[:20]:
            recorder.record(row)
        await recorder.flush()  # nothing lost, nothing waits in memory
        spooled = (recorder.pending, recorder.spooled, recorder.database_away, recorder.spool.size().bytes > 0)
        database.away = False
        for row in rows[20:]:
            recorder.record(row)
        await recorder.flush()
        await recorder.flush()  # a second replay finds nothing left to write
        return recorder, spooled

    recorder, spooled = _run(main)
    assert spooled == (0, 20, True, True)
    assert _stored_ids() == sorted(row[0] for row in rows)
    assert (recorder.replayed, recorder.lost, recorder.database_away) == (20, 0, False)
    assert recorder.spool.size().bytes == 0
    assert _counter(recorder._metrics, "switchyard_gateway_usage_spooled_total") == 20
    assert _counter(recorder._metrics, "switchyard_gateway_usage_replayed_total") == 20


def test_a_gateway_restarted_during_the_outage_replays_what_the_previous_one_spooled(tenant_a, tmp_path):
    database, rows = Database(), _rows(tenant_a, 12)

    async def main(db):
        first = _recorder(db, tmp_path, database)
        for row in rows:
            first.record(row)
        await first.flush()  # the shutdown flush, with the database away
        first.close()
        database.away = False
        second = _recorder(db, tmp_path, database)  # the next process, once the database is back
        await second.flush()
        return second

    second = _run(main)
    assert _stored_ids() == sorted(row[0] for row in rows)
    assert second.replayed == 12


def test_a_spool_replayed_twice_still_counts_each_event_once(tenant_a, tmp_path):
    """A replayer that died between writing a segment and deleting it: the next one writes it again."""
    spool, rows = UsageSpool(tmp_path / "spool", 1024 * 1024), _rows(tenant_a, 8)
    spool.append(rows)
    spool.release()
    copy = next((tmp_path / "spool").glob("segment-*")).read_bytes()

    async def main(db):
        recorder = _recorder(db, tmp_path, Database(away=False))
        await recorder.flush()
        (tmp_path / "spool" / "segment-0-0.jsonl").write_bytes(copy)  # the same events, again
        await recorder.flush()
        return recorder

    recorder = _run(main)
    assert _stored_ids() == sorted(row[0] for row in rows)
    assert UsageEvent.objects.count() == 8 and recorder.replayed == 16


def test_what_does_not_fit_in_a_full_spool_is_counted_lost_never_silently(tenant_a, tmp_path, caplog):
    rows = _rows(tenant_a, 10)
    one_event = len(encode_events(rows[:1]))

    with caplog.at_level(logging.ERROR, logger="gateway.metering"):
        recorder = _record_and_flush(tmp_path, rows, Database(),
                                     spool=UsageSpool(tmp_path / "spool", int(one_event * 3.5)))
    assert (recorder.spooled, recorder.lost) == (3, 7)
    assert _counter(recorder._metrics, "switchyard_gateway_usage_lost_total", reason="spool_full") == 7
    assert any("lost 7 usage events (spool_full)" in record.getMessage() for record in caplog.records)


def test_a_torn_last_line_from_a_crash_is_counted_and_the_rest_replayed(tenant_a, tmp_path):
    spool, rows = UsageSpool(tmp_path / "spool", 1024 * 1024), _rows(tenant_a, 5)
    spool.append(rows)
    segment = next((tmp_path / "spool").glob("segment-*"))
    with open(segment, "ab") as file:
        file.write(b'{"request_id": "req-torn", "occurred_')  # the append a crash cut short
    spool.release()

    recorder = _record_and_flush(tmp_path, [], Database(away=False))
    assert _stored_ids() == sorted(row[0] for row in rows)
    assert (recorder.replayed, recorder.lost) == (5, 1)
    assert _counter(recorder._metrics, "switchyard_gateway_usage_lost_total", reason="torn_spool_line") == 1


CHILD = """
import sys, time
from datetime import datetime, timezone
from gateway.metering.recorder import RequestRecord
from gateway.metering.spool import UsageSpool
spool = UsageSpool(sys.argv[1], 1024 * 1024)
spool.append([RequestRecord(f"child-{i}", "chat", tenant_id=int(sys.argv[2]), status_code=200, outcome="ok").as_row()
              for i in range(7)])
print("spooled", flush=True)
time.sleep(60)
"""


def test_a_crashed_workers_segment_is_replayed_by_another_process_and_a_live_ones_is_not(tenant_a, tmp_path):
    import signal
    import subprocess
    import sys

    from bench._procs import REPO_ROOT

    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "spool"), str(tenant_a.pk)], cwd=REPO_ROOT,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "spooled"

        async def main(db):
            recorder = _recorder(db, tmp_path, Database(away=False))
            await recorder.flush()  # the child is alive and may still append: its segment is not free
            alive = await db.run(_stored_ids)
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
            await recorder.flush()
            return alive

        assert _run(main) == []
        assert _stored_ids() == [f"child-{i}" for i in range(7)]
        assert not list((tmp_path / "spool").glob("segment-*"))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
