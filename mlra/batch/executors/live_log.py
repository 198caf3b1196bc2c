"""A run's event logs, followed on a node without the batch folder and copied to the driver.

Such a run writes its folder in the node's scratch, and the folder comes back only at
the run's end: until then the batch's progress line said only "running" for it, where a
local run's line gives its clock, its progress and its cost, derived from its event log.
So the node sends each of the run's event logs (its own, and each searching attempt's)
as it grows, whole lines only, and the driver keeps a byte-exact copy laid out as the
run folder (`<out>/.incoming/<token>/live/<attempt>/`). The batch reads that copy as it
reads a local run's folder (batch/state.py): the log stays the one source of the numbers.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from mlra.agent.loop.attempts import ATTEMPTS_DIR
from mlra.agent.record.eventlog import EVENTS_FILE

LIVE = "live"
"""The copies' folder in a batch's own folder for arrivals."""
POLL_S = 1.0
"""How often the node looks for what the run's logs gained (the batch reads once a second)."""
PIECE = 4 << 20
"""The most one message carries: a resumed run's log is sent whole, and may be large."""

Piece = tuple[str, int, bytes]
"""A log's path in the run folder, the offset its bytes go at, the bytes."""

_LOG_PATH = re.compile(rf"^(?:{ATTEMPTS_DIR}/(?!\.\.?/)[^/]+/)?{re.escape(EVENTS_FILE)}$")


class LogTail:
    """The event logs of a run folder on its node, each read on from where it was left."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._sent: dict[str, int] = {}

    def _logs(self) -> list[str]:
        found = [EVENTS_FILE]
        try:
            attempts = sorted((self.run_dir / ATTEMPTS_DIR).iterdir())
        except OSError:
            return found
        return found + [f"{ATTEMPTS_DIR}/{a.name}/{EVENTS_FILE}" for a in attempts if a.is_dir()]

    def poll(self) -> Iterator[Piece]:
        """What each log gained since the last poll, up to its last whole line: a line
        being written may yet be cut away (eventlog.EventLog.append)."""
        for rel in self._logs():
            sent = self._sent.get(rel, 0)
            try:
                with open(self.run_dir / rel, "rb") as log:
                    size = os.fstat(log.fileno()).st_size
                    if size < sent:  # written anew, shorter: sent again from its start
                        sent = 0
                        yield rel, 0, b""
                    log.seek(sent)
                    data = log.read(size - sent)
            except OSError:
                continue  # not begun yet
            end = data.rfind(b"\n") + 1
            for start in range(0, end, PIECE):
                yield rel, sent + start, data[start : min(end, start + PIECE)]
            self._sent[rel] = sent + end


def copy_folder(incoming: Path, attempt: str) -> Path:
    """Where an attempt's logs are copied on the driver, laid out as its run folder."""
    return incoming / LIVE / attempt


def write_piece(folder: Path, piece: Piece) -> bool:
    """Put a piece in the copy; False for one that names no log of a run folder, or that
    would leave a gap (the node sends each log's bytes in order)."""
    rel, offset, data = piece
    if not _LOG_PATH.match(rel):
        return False
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as log:
        if offset > os.fstat(log.fileno()).st_size:
            return False
        log.truncate(offset)  # a log the node found written anew starts again at 0
        log.write(data)
    return True
