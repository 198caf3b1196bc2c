"""Watching a Ray cluster's head for the batch driving runs on it.

When the head (its GCS) dies, Ray's core ends the driver's process about 60 s later
from C++ (`_Exit`), its only word a line in `<out>/ray.log`: the batch vanished from
the terminal with no line and no report. The head's GCS port is tried with a plain TCP
connection every `CHECK_S`; when nothing has answered there for `HEAD_LOST_S` (well
inside Ray's 60 s), the batch is told (`on_lost`) so that it says so and writes its
report before Ray ends it. A blip shorter than that goes unremarked, as Ray lets it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

CHECK_S = 2.0
HEAD_LOST_S = 20.0
"""Nothing at the head's port for this long: lost (Ray itself gives up at 60 s)."""


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=CHECK_S):
            return True
    except OSError:
        return False


class HeadWatch:
    """A daemon thread calling `on_lost(why)` once, when the head stops answering."""

    def __init__(self, gcs_address: str, on_lost: Callable[[str], None]) -> None:
        host, _, port = gcs_address.rpartition(":")
        self.address = gcs_address
        self._target = (host.strip("[]"), int(port))
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="mlra-ray-head")
        self._thread.start()

    def _watch(self) -> None:
        answered = time.monotonic()
        while not self._stop.wait(CHECK_S):
            if _answers(*self._target):
                answered = time.monotonic()
            elif time.monotonic() - answered >= HEAD_LOST_S and not self._stop.is_set():
                silent = time.monotonic() - answered
                self._on_lost(f"its head at {self.address} has not answered for {silent:.0f} s")
                return

    def stop(self) -> None:
        self._stop.set()
