"""Sizes as people write them in flags and batch files (`512m`, `16g`, `none`): shared
by the command line and batches, which pass them on to the runs they start."""

from __future__ import annotations

import math

NO_LIMIT_WORDS = ("none", "off", "unlimited")
MAX_SIZE_MB = 1024**3
"""A pebibyte (1024t): past it a size is a typo."""


def parse_size_mb(text: str, *, least_mb: int, example: str) -> int:
    """Sizes as Docker writes them (512m, 16g, 16GB); a plain number is in MB; `none`
    (or off, unlimited) is 0, no limit. Raises ValueError with the reason."""
    if text.strip().lower() in NO_LIMIT_WORDS:
        return 0
    units = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
    raw = text.strip().lower().removesuffix("b").removesuffix("i")
    unit = raw[-1:] if raw[-1:] in units else "m"
    bad = f"{text!r} is not a size (e.g. {example}, or none)"
    try:
        value = float(raw[:-1] if raw[-1:] in units else raw) * units[unit]
    except ValueError:
        raise ValueError(bad) from None
    if not math.isfinite(value):
        raise ValueError(bad)
    if value < least_mb:
        raise ValueError(f"{text!r} is too small (at least {least_mb}m, or none)")
    if value > MAX_SIZE_MB:
        raise ValueError(f"{text!r} is too large (at most 1024t)")
    return int(value)


def disk_mb(text: str) -> int:
    """A disk quota or a log's budget: at least 1 MB, or none (0)."""
    return parse_size_mb(text, least_mb=1, example="500m, 50g")
