"""A container's CPU and memory use, as `docker stats` shows them.

The engine reports CPU as a running total of nanoseconds, so a percentage needs
the previous reading; one instance per container keeps it. Each reading is one
non-blocking stats call, cheap enough for the Resources pane's sampling.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass
class ContainerStats:
    cpu_percent: float
    """Of one CPU (200 = two CPUs busy)."""
    mem_used_mb: float
    mem_limit_mb: float


class StatsReader:
    """Reads one container's use; a failed read is None, never an error."""

    def __init__(self) -> None:
        self._prev: tuple[float, float] | None = None

    def read(self, container: Any) -> ContainerStats | None:
        try:
            stats = container.stats(stream=False, one_shot=True)
        except Exception:
            return None
        cpu = stats.get("cpu_stats") or {}
        total = float((cpu.get("cpu_usage") or {}).get("total_usage") or 0)
        now = time.monotonic()
        percent = 0.0
        if self._prev is not None:
            prev_total, prev_at = self._prev
            if now > prev_at:
                percent = max(0.0, (total - prev_total) / 1e9 / (now - prev_at) * 100)
        self._prev = (total, now)
        mem = stats.get("memory_stats") or {}
        used = float(mem.get("usage") or 0)
        detail = mem.get("stats") or {}
        # What `docker stats` shows: page cache that can be dropped does not count.
        used -= float(detail.get("inactive_file", detail.get("total_inactive_file", 0)) or 0)
        limit = float(mem.get("limit") or 0)
        return ContainerStats(
            cpu_percent=round(percent, 1),
            mem_used_mb=max(used, 0.0) / 2**20,
            mem_limit_mb=limit / 2**20,
        )
