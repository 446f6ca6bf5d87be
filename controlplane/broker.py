"""kombu's filesystem transport (the embedded broker), with messages that appear in the queue whole.

kombu writes a message by creating its file in the queue folder and then writing it, while a
consumer takes any file it lists there without waiting: a consumer that lists the folder in
between reads an empty message, and the JSON error kills its connection — the worker then takes no
task until restarted (seen under load: the fleet stopped converging). Here a message is written
under a name consumers skip, then renamed into place, which is atomic on one filesystem.

Binding a queue has the same race in the control folder: kombu checks that the exchange file exists,
then creates it with a truncating open and locks it afterwards, so a second producer can lock and
read the still-empty file (the JSON error kills its publish) or truncate a table just written. Here
a new exchange file is put in place whole (written aside, then linked), and an existing one is
locked before it is read and rewritten. And kombu's process-wide state lets a second thread skip a
binding the first is still writing, whose messages then found no queue and were dropped silently:
a binding this process made counts before its file holds it.

And a Celery worker runs its event loop on it, as on Redis: stock kombu declares the transport
blocking, so the worker fell back to its blocking loop (a stop request is seen only between 2-second
waits for a message) and a thread-driven prefork pool whose threads and timer poll once a second —
about 5 s for a warm shutdown — and a SIGTERM to the worker's whole process group could leave it
waiting forever for a pool lock a killed child held. Here the worker's event loop polls the queue
folder on a timer (every `polling_interval`), so its pool and timers are the event-driven ones.
"""
import fcntl
import os
import socket
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        # A leading dot: `_get` takes only names whose text after the first dot is "<queue>.msg".
        incoming = os.path.join(self.data_folder_out, f".incoming-{uuid.uuid4().hex}")
        try:
            with open(incoming, "wb") as message:
                message.write(str_to_bytes(dumps(payload)))
            os.rename(incoming, os.path.join(self.data_folder_out, name))
        except OSError as exc:
            raise ChannelError(f"Cannot add file {name!r} to directory") from exc


    def get_table(self, exchange):
        # kombu's process-wide state marks a binding made before its file is written, and a second
        # thread then skips binding: what this process bound counts even before the file holds it.
        bound_here = [_binding(*meta) for meta in self.state.exchanges.get(exchange, {}).get("table", [])]
        return list(dict.fromkeys([*self._table_in_file(exchange), *bound_here]))

    def _table_in_file(self, exchange):
        path = self._exchange_file(exchange)
        try:
            with open(path, "rb") as table:
                fcntl.flock(table.fileno(), fcntl.LOCK_SH)
                return [filesystem.exchange_queue_t(*q) for q in loads(bytes_to_str(table.read()))]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot open {path}") from exc

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        path = self._exchange_file(exchange)
        self.control_folder.mkdir(parents=True, exist_ok=True)
        binding = _binding(routing_key, pattern, queue)
        try:
            if not self._create_table(path, binding):
                self._add_binding(path, binding)
        except OSError as exc:
            raise ChannelError(f"Cannot open {path}") from exc

    def _create_table(self, path, binding):
        """Puts a new exchange file in place whole (False when one exists): it is never seen empty."""
        draft = path.with_name(f".draft-{uuid.uuid4().hex}")
        draft.write_bytes(str_to_bytes(dumps([binding])))
        try:
            os.link(draft, path)
            return True
        except FileExistsError:
            return False
        finally:
            draft.unlink()

    def _add_binding(self, path, binding):
        with open(path, "r+b", buffering=0) as table:
            fcntl.flock(table.fileno(), fcntl.LOCK_EX)  # released when the file closes
            queues = [filesystem.exchange_queue_t(*q) for q in loads(bytes_to_str(table.read()))]
            if binding not in queues:
                table.seek(0)
                table.truncate()
                table.write(str_to_bytes(dumps([binding, *queues])))


def _binding(routing_key, pattern, queue):
    """One row of an exchange table, as kombu writes it to the file (None stored as "")."""
    return filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")


class Transport(filesystem.Transport):
    Channel = Channel
    implements = filesystem.Transport.implements.extend(asynchronous=True)

    def register_with_event_loop(self, connection, loop):
        # No descriptor says "a message arrived" in a folder: the loop asks on a timer instead.
        loop.call_repeatedly(self.polling_interval, self._deliver_waiting, connection)

    def _deliver_waiting(self, connection):
        """Hands every message waiting now to its consumer (the worker's QoS stops it at its prefetch)."""
        while True:
            try:
                self.drain_events(connection, timeout=0)
            except socket.timeout:
                return
