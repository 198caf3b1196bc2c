"""Printing to a reader that may go away: what both headless displays share.

`mlra run ... | head` closes the pipe after a few lines; a closed terminal gives EIO.
The run must not die of that, so a display stops printing at the first failed write.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import IO

from mlra.terminal_text import printable


def _silence(stream: IO[str]) -> bool:
    """Point the stream's file descriptor at /dev/null, so that what is still buffered,
    the final line and the interpreter's last flush go nowhere instead of failing again.
    True when stderr was the same pipe (`2>&1 | head`) and was silenced with it."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # a StringIO: nothing to point elsewhere
        return False
    try:
        same = fd != 2 and os.path.samestat(os.fstat(fd), os.fstat(2))
    except OSError:
        same = False
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
        if same:
            os.dup2(devnull, 2)
    finally:
        os.close(devnull)
    return same


def tell_stderr(text: str) -> None:
    """A line for the person at the terminal; a stderr nobody reads is not an error."""
    try:
        sys.stderr.write(printable(text) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class Printer:
    """What both displays share: they print until the reader goes away.

    `mlra run ... | head` closes the pipe after a few lines. The run must not die
    of that (a display is an event subscriber, and a subscriber that raises ends the
    run): from the first failed write the display prints nothing more, the run goes
    on, and its event log, the record of the run, is written in full.
    """

    stream: IO[str]
    reader_gone: bool = False
    stderr_gone: bool = False
    on_reader_gone: Callable[[], None] | None = None
    """Told once, when the reader has gone and stderr still reaches someone."""

    def _print(self, write: Callable[[], None]) -> bool:
        """Run one write; False (and nothing further printed) once the reader has gone."""
        if self.reader_gone:
            return False
        try:
            write()
            return True
        except (OSError, ValueError):  # BrokenPipeError; EIO on a closed terminal
            self.reader_gone = True
            self.stderr_gone = _silence(self.stream)
            if not self.stderr_gone and self.on_reader_gone is not None:
                self.on_reader_gone()
            return False

    def line(self, text: str) -> bool:
        """One line as it is (the final line); False when it could not be printed."""

        def write() -> None:
            self.stream.write(text + "\n")
            self.stream.flush()

        return self._print(write)

    def close(self) -> None:
        self._print(self.stream.flush)
