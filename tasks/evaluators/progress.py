"""The evaluator's progress, read from its output as it grades.

An lm-eval grading runs for minutes with nothing to show but its progress bars
(tqdm, written to stderr and redrawn with carriage returns); a script evaluator
prints what it likes. The evaluation process's output streams through the sandbox
(tasks/evaluators/base.py); this turns its latest line into `evaluation_progress`
events, at most one every few seconds, so a long grading shows it is moving and the
log stays small. The evaluator is the task's own, but the lines may quote the
submission: they are data, logged as written and escaped where shown.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from mlra import events as ev
from mlra.terminal_text import printable_line

EVERY_S = 5.0
"""The longest a new line waits to be logged: one event at most every this often..."""
NEW_PHASE_S = 1.0
"""...except a progress bar of another description (lm-eval's next phase), which waits
only this long."""
MAX_LINE = 300
"""A line longer than this is cut: it is a glimpse of progress, not the evaluator's log
(which is kept whole in the evaluation folder)."""

_BAR = re.compile(r"^(?P<what>.*?):?\s*(?P<pct>\d{1,3})%\|[^|]*\|\s*(?P<done>\d+)/(?P<total>\d+)")


def parse_line(line: str) -> ev.EvaluationProgress:
    """A line as a progress event: a progress bar's description and counts, where it
    is one ("Running loglikelihood requests:  45%|####5     | 4500/10000 [00:30<...]")."""
    line = line.strip()[:MAX_LINE]
    bar = _BAR.match(line)
    if bar is None:
        return ev.EvaluationProgress(line=line)
    return ev.EvaluationProgress(
        line=line,
        what=bar["what"].strip(),
        done=int(bar["done"]),
        total=int(bar["total"]),
    )


class ProgressReader:
    """Fed the evaluation process's output as it comes, in chunks; calls `emit` with the
    latest whole line, as often as EVERY_S allows (a line held back meanwhile goes out
    with `flush`, which the caller calls now and then: the evaluator may fall silent
    after it). A line is whole once a newline or a carriage return (a progress bar
    redrawn) ends it."""

    def __init__(
        self,
        emit: Callable[[ev.EvaluationProgress], object],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._emit = emit
        self._clock = clock
        self._partial = ""
        self._last_at: float | None = None
        self._last: ev.EvaluationProgress | None = None
        self._held: ev.EvaluationProgress | None = None

    def feed(self, text: str) -> None:
        pieces = re.split(r"[\r\n]", self._partial + text)
        self._partial = pieces.pop()[-4 * MAX_LINE :]  # a line not yet ended
        for piece in pieces:
            if piece.strip():
                self._offer(parse_line(piece))

    def _offer(self, progress: ev.EvaluationProgress) -> None:
        last = self._held or self._last
        if last is not None and (progress.line, progress.done) == (last.line, last.done):
            return
        self._held = progress
        new_phase = last is not None and progress.total is not None and progress.what != last.what
        self._send(NEW_PHASE_S if new_phase else EVERY_S)

    def flush(self) -> None:
        """Log the line held back, once EVERY_S has passed since the last one."""
        self._send(EVERY_S)

    def _send(self, wait_s: float) -> None:
        held, now = self._held, self._clock()
        if held is None or (self._last_at is not None and now - self._last_at < wait_s):
            return
        self._last, self._last_at, self._held = held, now, None
        self._emit(held)


def progress_words(e: ev.EvaluationProgress) -> str:
    """The progress as the displays write it: "45% (4,500/10,000) Running loglikelihood
    requests", or the line itself; escaped, never obeyed."""
    if e.total:
        done = e.done or 0
        what = f" {printable_line(e.what)}" if e.what else ""
        return f"{100 * done // e.total}% ({done:,}/{e.total:,}){what}"
    return printable_line(e.line)
