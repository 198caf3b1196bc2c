"""The `metrics.jsonl` convention: a training script that writes one JSON object of
numbers a line (`{"step": 100, "loss": 2.31, "val/acc": 0.5}`) to a file of that name,
anywhere in the workspace, has its numbers plotted exactly, with no guessing at log
shapes. Read incrementally: only whole lines, from where the last read ended.

The file is the agent's: a line that is not a JSON object of numbers, whatever the
reason (not JSON, invalid UTF-8, `[` nested thousands deep, a number too large for a
float), is skipped and counted, never stopping the lines after it; a line longer than
`MAX_JSONL_LINE` is skipped to its end without being held, however long it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import cast

from mlra.agent.metrics.log_lines import LinePoint, points_of_mapping

METRICS_FILE = "metrics.jsonl"
MAX_JSONL_LINE = 64 * 1024
"""A longer line is skipped as not a line of metrics."""


def is_metrics_file(name: str) -> bool:
    """`metrics.jsonl`, or `<anything>.metrics.jsonl` (one file per run of a script)."""
    return name == METRICS_FILE or name.endswith("." + METRICS_FILE)


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deep"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8"
    if isinstance(exc, ValueError):
        return "not JSON"
    return f"unreadable ({type(exc).__name__})"


@dataclass
class JsonlReader:
    offset: int = 0
    lines: int = 0
    """Lines read so far (to name the first bad one)."""
    bad_lines: int = 0
    """Lines that were not a JSON object (counted; the file's first one is told once)."""
    first_bad: str = ""
    """What the first bad line was: `line 3 (nested too deep)`."""
    numbered: bool = True
    """Whether `lines` counts from the file's start (not on a resumed reading)."""
    skipping: bool = False
    """Inside a line past MAX_JSONL_LINE: what comes up to its newline is passed over."""

    def read(self, data: bytes) -> list[LinePoint]:
        """The points of the whole lines in `data` (the file's bytes from `offset`);
        advances `offset` past them, leaving an unfinished last line for next time."""
        start = 0
        if self.skipping:
            start = data.find(b"\n") + 1
            if start == 0:  # still inside the long line
                self.offset += len(data)
                return []
            self.skipping = False
        end = data.rfind(b"\n")
        out: list[LinePoint] = []
        if end >= start:
            for raw in data[start:end].split(b"\n"):
                self.lines += 1
                out += self._line(raw)
            start = end + 1
        if len(data) - start > MAX_JSONL_LINE:  # one endless line: skipped to its end
            self.lines += 1
            self._bad(f"longer than {MAX_JSONL_LINE:,} bytes")
            self.skipping = True
            start = len(data)
        self.offset += start
        return out

    def _line(self, raw: bytes) -> list[LinePoint]:
        line = raw.strip()
        if not line:
            return []
        if len(line) > MAX_JSONL_LINE:
            self._bad(f"longer than {MAX_JSONL_LINE:,} bytes")
            return []
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                self._bad("not a JSON object")
                return []
            return points_of_mapping(cast(dict[str, object], obj))
        except Exception as exc:  # any fault of one line skips that line only
            self._bad(_why(exc))
            return []

    def _bad(self, why: str) -> None:
        self.bad_lines += 1
        at = f"line {self.lines}" if self.numbered else "a line"
        self.first_bad = self.first_bad or f"{at}: {why}"


__all__ = ["MAX_JSONL_LINE", "METRICS_FILE", "JsonlReader", "is_metrics_file"]
