"""The `metrics.jsonl` convention: a training script that writes one JSON object of
numbers a line (`{"step": 100, "loss": 2.31, "val/acc": 0.5}`) to a file of that name,
anywhere in the workspace, has its numbers plotted exactly, with no guessing at log
shapes. Read incrementally: only whole lines, from where the last read ended."""

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


@dataclass
class JsonlReader:
    offset: int = 0
    bad_lines: int = 0
    """Lines that were not a JSON object (counted; the file's first one is told once)."""

    def read(self, data: bytes) -> list[LinePoint]:
        """The points of the whole lines in `data` (the file's bytes from `offset`);
        advances `offset` past them, leaving an unfinished last line for next time."""
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) > MAX_JSONL_LINE:  # one endless line: skipped
                self.offset += len(data)
                self.bad_lines += 1
            return []
        out: list[LinePoint] = []
        for raw in data[:end].split(b"\n"):
            line = raw.strip()
            if not line:
                continue
            if len(line) > MAX_JSONL_LINE:
                self.bad_lines += 1
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                self.bad_lines += 1
                continue
            if not isinstance(obj, dict):
                self.bad_lines += 1
                continue
            out += points_of_mapping(cast(dict[str, object], obj))
        self.offset += end + 1
        return out


__all__ = ["METRICS_FILE", "JsonlReader", "is_metrics_file"]
