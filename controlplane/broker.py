"""kombu's filesystem transport (the embedded broker), with messages that appear in the queue whole.

kombu writes a message by creating its file in the queue folder and then writing it, while a
consumer takes any file it lists there without waiting: a consumer that lists the folder in
between reads an empty message, and the JSON error kills its connection — the worker then takes no
task until restarted (seen under load: the fleet stopped converging). Here a message is written
under a name consumers skip, then renamed into place, which is atomic on one filesystem.
"""
import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


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


class Transport(filesystem.Transport):
    Channel = Channel
