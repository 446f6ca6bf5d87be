"""kombu's filesystem transport (the embedded broker), with messages that appear in the queue whole.

kombu writes a message by creating its file in the queue folder and then writing it, while a
consumer takes any file it lists there without waiting: a consumer that lists the folder in
between reads an empty message, and the JSON error kills its connection — the worker then takes no
task until restarted (seen under load: the fleet stopped converging). Here a message is written
under a name consumers skip, then renamed into place, which is atomic on one filesystem.

Binding a queue has the same race in the control folder: kombu checks that the exchange file exists,
then creates it with a truncating open and locks it afterwards, so a second producer can lock and
read the still-empty file (the JSON error kills its publish) or truncate a table just written. Here
the file is opened without truncation, locked, then read and rewritten under the lock; an empty
file is an empty table.
"""
import fcntl
import os
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
        path = self._exchange_file(exchange)
        try:
            with open(path, "rb") as table:
                fcntl.flock(table.fileno(), fcntl.LOCK_SH)
                return [filesystem.exchange_queue_t(*q) for q in _read_table(table)]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot open {path}") from exc

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        path = self._exchange_file(exchange)
        self.control_folder.mkdir(parents=True, exist_ok=True)
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        try:
            with open(os.open(path, os.O_RDWR | os.O_CREAT, 0o600), "r+b", buffering=0) as table:
                fcntl.flock(table.fileno(), fcntl.LOCK_EX)  # released when the file closes
                queues = [filesystem.exchange_queue_t(*q) for q in _read_table(table)]
                if binding not in queues:
                    table.seek(0)
                    table.truncate()
                    table.write(str_to_bytes(dumps([binding, *queues])))
        except OSError as exc:
            raise ChannelError(f"Cannot open {path}") from exc


def _read_table(table):
    """The bindings in an exchange file: a file created but not yet written holds none."""
    text = bytes_to_str(table.read())
    return loads(text) if text.strip() else []


class Transport(filesystem.Transport):
    Channel = Channel
