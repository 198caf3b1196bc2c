"""A run's log budget: `events.jsonl` stays bounded however much the run prints.

The log is the run's one record, so nothing it needs is ever refused: a budget that
dropped a `run_finished` or a grading would leave a run that cannot be replayed or
scored. What grows a log without bound is what streams, which has a copy elsewhere
(a command's result holds its output's head and tail, a model's answer is logged
whole when it arrives, the live console shows the rest: agent/loop/unlogged.py), and
what a run's steps add up to. So past `SHORTEN_AT` of the budget the log stops taking
streams, commands' output and the model's text as it writes alike (an answer given up
on is logged once, whole: agent/loop/answer_stream.py); resource samples come a tenth
as often; a workspace snapshot lists `SHORT_SNAPSHOT_BYTES` of paths and counts the
rest (`WorkspaceSnapshot.log_budget_bytes`); and each tool result is cut to
`SHORT_RESULT_CHARS` before the model reads it: what the model saw is what was
recorded, and the result says so (`ToolResult.log_budget_chars`), so a replay cuts the
same result the same way. The model's answers stay whole (bounded by its answer
budget; a resume and a replay need them). A run whose log still reaches the budget
ends there as any budget ends a run, and is graded; its ending's few events are the
margin past the bound.

No side file keeps the full output: it would be the same unbounded growth in another
place. The model is told instead to write long output to a file of its workspace
(counted against its disk quota) and read it in parts.
"""

from __future__ import annotations

from collections.abc import Callable

DEFAULT_LOG_BUDGET_MB = 256.0
"""About 190 commands' streams of a million characters (the per-call cap) before the
shortening, or tens of thousands of steps of ordinary output."""
SHORTEN_AT = 0.75
"""The part of the budget after which streams are no longer logged and results are cut:
the rest is room for the model's answers and the run's ending."""
SHORT_RESULT_CHARS = 2_000
"""What a tool result keeps (head and tail) once the log is past `SHORTEN_AT`."""
SHORT_SNAPSHOT_BYTES = 8 * 1024
"""The paths a workspace snapshot lists once the log is past `SHORTEN_AT` (about 40 files;
256 KiB before): the rest are counted, and a fork says it cannot restore them."""
SAMPLES_SLOWED = 10
"""Past `SHORTEN_AT` a resource sample is taken this many times less often (every 10 s
by default): one is about 310 bytes, 1.2 KB with eight GPUs (4 MB an hour each second)."""
LOG_BUDGET_CUT_NOTE = (
    "[the run's log is near its size budget, so this output was cut to "
    "{kept:,} characters: write long output to a file and read the parts you need]\n"
)
STREAM_BUDGET_NOTE = (
    "\n[... the run's log is near its size budget: it keeps no more streamed output "
    "(the live console still shows it); the call's result holds its end ...]\n"
)
MB = 1024 * 1024


class LogBudget:
    """Where a run's log stands against its budget (`--log-budget`, `RunConfig.log_budget_mb`).

    `size` reads the log's bytes now (`EventLog.size`); a resumed or forked run counts
    the log it goes on from."""

    def __init__(self, budget_mb: float | None) -> None:
        self.limit = int(budget_mb * MB) if budget_mb else None
        self._size: Callable[[], int] = lambda: 0
        self._told = False

    def measure(self, size: Callable[[], int]) -> None:
        self._size = size

    @property
    def shorten_at(self) -> int | None:
        return int(self.limit * SHORTEN_AT) if self.limit is not None else None

    def stream_room(self) -> int | None:
        """Bytes of streamed output the log may still take (None: no budget)."""
        at = self.shorten_at
        return None if at is None else max(0, at - self._size())

    def shortening(self) -> bool:
        at = self.shorten_at
        return at is not None and self._size() >= at

    def used_up(self) -> bool:
        return self.limit is not None and self._size() >= self.limit

    def result_cut(self) -> int | None:
        """The characters a tool result ending now may keep, where the budget cuts it."""
        return SHORT_RESULT_CHARS if self.shortening() else None

    def told(self, before: bool) -> None:
        """Whether the log a run goes on from (a resume's, a fork's) said it already: said
        again only where the run's budget was raised above where that log now is."""
        self._told = before and self.shortening()

    def notice_due(self) -> str | None:
        """The notice, once a run, when its log has just passed `SHORTEN_AT`."""
        if self._told or not self.shortening():
            return None
        self._told = True
        return self.notice()

    def notice(self) -> str:
        """The one notice a run gets when its log passes `SHORTEN_AT`."""
        assert self.limit is not None
        return (
            f"the run's log passed {SHORTEN_AT:.0%} of its size budget "
            f"({_mb(self.limit)}, --log-budget): from here commands' output and the "
            "model's text are not streamed into the log (the console still shows them; "
            "each answer is logged whole), workspace snapshots list fewer files, and each "
            f"tool result keeps {SHORT_RESULT_CHARS:,} characters, its head and tail, for "
            "the model and the log alike; at the budget the run ends and is graded"
        )

    def ending_message(self) -> str:
        assert self.limit is not None
        return f"log budget used up ({_mb(self._size())} of {_mb(self.limit)}, --log-budget)"


def _mb(size: int) -> str:
    return f"{size / MB:,.1f} MB" if size < 10 * MB else f"{size / MB:,.0f} MB"
