"""`--notify bell`: the terminal bell, rung on the controlling terminal.

`/dev/tty` first: it is the user's terminal even where stderr is a file or the
console (Textual) owns stdout and stderr; stderr when it is a terminal otherwise.
"""

from __future__ import annotations

import sys

from mlra.agent.notify.note import Notification, NotifyFailed
from mlra.agent.notify.threads import in_daemon_thread

BELL = "\a"


def ring() -> None:
    try:
        with open("/dev/tty", "w", encoding="utf-8") as tty:
            tty.write(BELL)
            return
    except OSError:
        pass
    stderr = sys.__stderr__
    if stderr is not None and stderr.isatty():
        stderr.write(BELL)
        stderr.flush()
        return
    raise NotifyFailed("no terminal to ring the bell on")


class Bell:
    described = "bell"

    async def send(self, note: Notification) -> None:
        await in_daemon_thread(ring, name="mlra-notify-bell")
