"""The evaluator's progress, read from its output as it grades.

An lm-eval grading runs for seconds to hours with nothing to show but its progress
bars (tqdm, written to stderr and redrawn with carriage returns); a script evaluator
prints what it likes. The evaluation process's output streams through the sandbox
(tasks/evaluators/base.py); this turns its latest line into `evaluation_progress`
events, paced so that a grading of seconds shows its counts rising and one of hours
keeps the log small. The evaluator is the task's own, but the lines may quote the
submission: they are data, logged as written and escaped where shown.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable

from mlra import events as ev
from mlra.terminal_text import printable_line

MIN_S = 0.5
"""The shortest wait between two progress events: two a second at most, while a
grading is young (a baseline's lm-eval grading lasts seconds, its bars less than one)..."""
EVERY_S = 5.0
"""...the longest: a new line waits this long at most. Between the two, the wait is
PACE times the time the grading has run: at most 10 events in its first 5 s, 33 in its
first 50 s, and 23 + T/5 in T seconds after that (some 750 an hour)."""
PACE = 0.1
TICK_S = MIN_S / 2
"""How often the caller calls `flush`: a line held back goes out this late at most."""
MAX_LINE = 300
"""A line longer than this is cut: it is a glimpse of progress, not the evaluator's log
(which is kept whole in the evaluation folder)."""

_BAR = re.compile(r"^(?P<what>.*?):?\s*(?P<pct>\d{1,3})%\|[^|]*\|\s*(?P<done>\d+)/(?P<total>\d+)")
_STEP = re.compile(r"^(?:lm-eval: )?(?P<step>Running \S+ requests)\s*$")
"""lm-eval's own line naming the kind of request it runs next ("lm-eval: Running
loglikelihood_rolling requests")."""
_WHOLE_BAR = re.compile(r"\|\s*\d+/\d+\s*\[[^\]]*\]\s*$")
"""The end of a bar tqdm has written whole ("| 65/1720 [00:00<00:02, 555.86it/s]"):
tqdm writes "\\r" + line, so its latest line is ended only by the next redraw."""


def parse_line(line: str, context: str = "") -> ev.EvaluationProgress:
    """A line as a progress event: a progress bar's description and counts, where it
    is one ("Running loglikelihood requests:  45%|####5     | 4500/10000 [00:30<...]").
    A bar without a description (lm-eval's building of each task's requests) is named
    by `context`, the evaluator's last line that was not a bar."""
    line = line.strip()[:MAX_LINE]
    bar = _BAR.match(line)
    if bar is None:
        return ev.EvaluationProgress(line=line)
    return ev.EvaluationProgress(
        line=line,
        what=bar["what"].strip() or context,
        done=int(bar["done"]),
        total=int(bar["total"]),
    )


class ProgressReader:
    """Fed the evaluation process's output as it comes, in chunks; calls `emit` with the
    latest line, at most once every `wait_s()` (a line held back meanwhile goes out
    with `flush`, which the caller calls every TICK_S: the evaluator may fall silent
    after it; and with `close`, once the evaluator has ended, whatever the wait).

    A line is whole once a newline or a carriage return ends it, or, for a progress
    bar, once it reads as a whole bar: tqdm redraws with "\\r" + line, and waiting for
    the next redraw to end it would show every bar one update late (a bar whose first
    batch takes a minute, at its 0% line of before)."""

    def __init__(
        self,
        emit: Callable[[ev.EvaluationProgress], object],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._emit = emit
        self._clock = clock
        self._started = clock()
        self._partial = ""
        self._context = ""
        self._step = ""
        """The kind of request lm-eval said it runs now, where it said one."""
        self._last_at: float | None = None
        self._last: ev.EvaluationProgress | None = None
        self._held: ev.EvaluationProgress | None = None
        self._bars = 0
        """Bars seen so far, each counted though its lines were held back unlogged."""
        self._bar_at: tuple[str, int | None, int] | None = None
        """The latest bar's description, total and count."""
        self._repeats: Counter[str] = Counter()
        """Bars seen so far of each description."""

    def wait_s(self) -> float:
        """How long a line waits after the last one logged, now."""
        return min(EVERY_S, max(MIN_S, PACE * (self._clock() - self._started)))

    def feed(self, text: str) -> None:
        pieces = re.split(r"[\r\n]", self._partial + text)
        self._partial = pieces.pop()[-4 * MAX_LINE :]  # a line not yet ended
        for piece in pieces:
            self._take(piece)
        if _WHOLE_BAR.search(self._partial):
            self._take(self._partial)

    def _take(self, piece: str) -> None:
        if not piece.strip():
            return
        progress = parse_line(piece, self._context)
        if progress.total is None:
            self._context = progress.line
            if step := _STEP.match(progress.line):
                self._step = step["step"]
        else:
            named = _STEP.match(progress.what)
            if self._step and named and named["step"] != self._step:
                # lm-eval's rolling requests run as bars of plain "Running loglikelihood
                # requests", one a batch of windows: named by the step they are part of,
                # or "pass 10" of the requests' bar read as that bar begun again.
                progress.what = self._step
            self._number(progress)
        self._offer(progress)

    def _number(self, progress: ev.EvaluationProgress) -> None:
        """Number the bar `progress` belongs to, in the grading and among the bars of its
        description: the latest one, unless it names another step or total, or its count
        fell (a new bar of the same name)."""
        done = progress.done or 0
        at = self._bar_at
        if at is None or (progress.what, progress.total) != at[:2] or done < at[2]:
            self._bars += 1
            self._repeats[progress.what] += 1
        self._bar_at = (progress.what, progress.total, done)
        progress.bar, progress.repeat = self._bars, self._repeats[progress.what]

    def _offer(self, progress: ev.EvaluationProgress) -> None:
        last = self._held or self._last
        if last is not None and _same(progress, last):
            return
        self._held = progress
        self._send(self.wait_s())

    def flush(self) -> None:
        """Log the line held back, once its wait has passed."""
        self._send(self.wait_s())

    def close(self) -> None:
        """The evaluator has ended: log the line held back now (a bar's last count),
        so the last progress before the score is where the evaluator got to."""
        self._send(0.0)

    def _send(self, wait_s: float) -> None:
        held, now = self._held, self._clock()
        if held is None or (self._last_at is not None and now - self._last_at < wait_s):
            return
        self._last, self._last_at, self._held = held, now, None
        self._emit(held)


def _same(a: ev.EvaluationProgress, b: ev.EvaluationProgress) -> bool:
    """The same news: a bar at the same count (tqdm's close redraws its last count with
    another rate and time, which is no progress), or the same plain line."""
    if a.total is not None or b.total is not None:
        return (a.what, a.done, a.total, a.bar) == (b.what, b.done, b.total, b.bar)
    return a.line == b.line


def progress_words(e: ev.EvaluationProgress) -> str:
    """The progress as the displays write it, in the evaluator's own words for what it
    counts: "45% (4,500/10,000) Running loglikelihood requests", "5% (2/32) Running
    loglikelihood_rolling requests, part 2" where a bar of that name starts again (the
    step goes in parts, each counted from 0), or the line itself; escaped, never obeyed."""
    if e.total:
        done = e.done or 0
        what = f" {printable_line(e.what)}" if e.what else ""
        again = f", part {e.repeat}" if e.repeat > 1 else ""
        return f"{100 * done // e.total}% ({done:,}/{e.total:,}){what}{again}"
    return printable_line(e.line)
