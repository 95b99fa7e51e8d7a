"""The embedded broker (``filesystem://``) with a message file that appears only when it is whole.

kombu's filesystem transport creates a message file under its final name and then writes it (a
``flock`` that only another writer would honour). A consumer polling the folder meanwhile renames
the half-written file away, reads it empty or cut short, and its ``json.loads`` raises out of the
consumer: ``Unrecoverable error: JSONDecodeError``, and the worker exits (seen in ``bin/demo``, a
``calls`` worker taking a submit while the web was still writing it). Here a message is written
under a name no consumer matches and renamed into place: ``rename`` is atomic within a folder, so a
consumer sees the whole file or none. Everything else is kombu's.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

#: what a message file's name ends with while it is written: kombu's consumer reads only names whose
#: part after the first dot is exactly ``<queue>.msg``
PARTIAL_SUFFIX = ".part"


class Channel(filesystem.Channel):
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]  # kombu's own two bases name it differently
        """Put a message on ``queue`` (the name kombu gives it: time ordered, then unique)."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + PARTIAL_SUFFIX
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.remove(partial)
            raise ChannelError(f"Cannot add file {name!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
