"""manage.py usage_spool [--replay] [--retry-dead-letter]: the gateway's usage spool and dead letter.

Without options it says what they hold. `--replay` writes the spooled events no gateway process holds
(a running gateway does this by itself once the database answers; this is for an install whose
gateways will not run again). `--retry-dead-letter` writes the set-aside events one by one, e.g. after
a fix: those still refused go back to the dead letter. Both are idempotent (request ids are unique).
"""
import asyncio
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from gateway.clients.database import DatabaseThreads, database_unavailable
from gateway.metering.recorder import UsageRecorder
from gateway.metering.spool import DEAD_LETTER_NAME, DeadLetter, UsageSpool


class Command(BaseCommand):
    help = "Show the gateway's usage spool and dead letter; replay the spool or retry the dead letter."

    def add_arguments(self, parser):
        parser.add_argument("--replay", action="store_true", help="Write every spooled event no gateway holds.")
        parser.add_argument("--retry-dead-letter", action="store_true", help="Write the set-aside events again.")

    def handle(self, *args, replay, retry_dead_letter, **options):
        directory = Path(settings.SWITCHYARD_GATEWAY_USAGE_SPOOL_DIR)
        limit = max(settings.SWITCHYARD_GATEWAY_USAGE_SPOOL_MAX_BYTES, 1)
        spool, dead_letter = UsageSpool(directory, limit), DeadLetter(directory / DEAD_LETTER_NAME, limit)
        if replay:
            self.stdout.write(f"replayed {asyncio.run(_replay(spool, dead_letter))} spooled events")
        if retry_dead_letter:
            stored, refused = retry_dead_letter_events(dead_letter)
            self.stdout.write(f"dead letter: {stored} events stored, {refused} refused again")
        size = spool.size()
        self.stdout.write(f"{directory}: {size.segments} spool segments ({size.bytes:,} bytes), "
                          f"{dead_letter.count()} events in the dead letter")


async def _replay(spool: UsageSpool, dead_letter: DeadLetter) -> int:
    """The gateway's own replay (UsageRecorder.flush), until nothing free is left or the database goes away."""
    db = DatabaseThreads(size=1)  # closes its connection afterwards
    recorder = UsageRecorder(run_in_thread=db.run, spool=spool, dead_letter=dead_letter)
    try:
        while True:
            before = recorder.replayed
            await recorder.flush()
            if recorder.database_away:
                raise CommandError("The database is unavailable; nothing more was replayed.")
            if recorder.replayed == before:
                return recorder.replayed
    finally:
        await db.close()


def retry_dead_letter_events(dead_letter: DeadLetter) -> tuple[int, int]:
    """(stored, refused again). With the database away the taken files stay, for the next try."""
    from usage.services import record_usage_batch

    events, taken = dead_letter.take()
    stored = refused = 0
    for event in events:
        try:
            stored += record_usage_batch([event]) or 1  # 0 new: it was stored already, which is fine too
        except Exception as error:
            if database_unavailable(error):
                raise CommandError("The database is unavailable; the dead letter is kept for the next try.") from error
            dead_letter.set_aside(event, error)
            refused += 1
    for path in taken:
        path.unlink()
    return stored, refused
