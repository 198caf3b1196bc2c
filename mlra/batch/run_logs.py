"""Each run's log in a batch folder (`logs/<run-id>.log`): what its `mlra run` printed,
every attempt under a header line of its own."""

from __future__ import annotations

import os
import time
from pathlib import Path

from mlra.batch.executors import Job


def last_line(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""


def log_header(path: Path, attempt: int, job: Job) -> None:
    """Each attempt's part of the run's log starts with a line of its own. An attempt
    queued again because the batch that queued it stopped before it began (killed, or
    Ctrl-C while it waited for resources or a node) keeps its one header: the log says
    when it was queued again, not that a second attempt 1 was made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    # Written when the attempt is queued: where and when it started comes when it does.
    header = f"[mlra batch] attempt {attempt}: {'resume' if job.resume else 'start'}, queued "
    last = tail_line(path)
    with open(path, "a", encoding="utf-8") as log:
        if last.startswith(header) or last.startswith(QUEUED_AGAIN):
            log.write(f"{QUEUED_AGAIN}{when} UTC (the batch stopped before it began)\n")
        else:
            log.write(f"{header}{when} UTC\n")


QUEUED_AGAIN = "[mlra batch] queued again "
TAIL_BYTES = 4096


def tail_line(path: Path) -> str:
    """The log's last line, read from its end (a run's log may be long)."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - TAIL_BYTES))
            tail = log.read()
    except OSError:
        return ""
    lines = tail.decode("utf-8", errors="replace").strip().splitlines()
    return lines[-1] if lines else ""
