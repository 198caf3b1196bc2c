"""Durations as people write them in task files and flags (`20m`, `1h30m`), and as
the console shows them: shared by the tasks, the agent, batches and the console."""

from __future__ import annotations

import math
import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(text: str | float | int) -> float:
    """'20m', '1h30m', '90s', '24h' or plain seconds; raises ValueError with the reason.

    `nan` and `inf` are refused: float() reads them, but no clock can wait for them
    (a deadline of nan never arrives and never passes).
    """
    if isinstance(text, int | float):
        if not math.isfinite(text):
            raise ValueError(f"{text!r} is not a duration (it must be a finite number)")
        if text <= 0:
            raise ValueError("a duration must be positive")
        return float(text)
    raw = text.strip().lower().replace(" ", "")
    if not raw:
        raise ValueError("empty duration")
    try:
        value = float(raw)
    except ValueError:
        pos = 0
        value = 0.0
        for match in _PART.finditer(raw):
            if match.start() != pos:
                break
            value += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(raw):
            raise ValueError(
                f"{text!r} is not a duration (use forms like 90s, 20m, 1h30m, 24h)"
            ) from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a duration (use a finite time such as 90s, 20m, 1h30m)")
    if value <= 0:
        raise ValueError("a duration must be positive")
    return value


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"
