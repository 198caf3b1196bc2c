"""An evaluation a killed mlra left running: found by its token and ended, so a run
is never graded by two evaluators at once."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from pydantic import BaseModel

GRADER_VAR = "MLRA_EVALUATOR_ID"
"""A token in the evaluation process's environment (and its children's), so one left
running by a killed mlra can be found and ended before the run is graded again."""

EVALUATOR_FILE = "evaluator.json"
"""In the evaluation folder while an evaluation runs: who runs it, and its token."""


class EvaluatorRecord(BaseModel):
    """What `evaluator.json` holds while an evaluation runs."""

    token: str
    owner_pid: int
    owner_started: float
    """The owning mlra process's start time, so a reused pid is not taken for it."""
    started: float


def started_at(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def end_stale_evaluator(work_dir: Path) -> str | None:
    """End an evaluation a killed mlra left running in `work_dir`: never two graders.

    Returns why grading cannot go on (another live mlra process is grading), or None.
    The processes are found by the token in their environment, and must have started
    after the record was written, so nothing else is ever killed.
    """
    import psutil

    path = work_dir / EVALUATOR_FILE
    try:
        record = EvaluatorRecord.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None
    me = os.getpid()
    owner_started = started_at(record.owner_pid)
    if record.owner_pid != me and owner_started is not None:
        if abs(owner_started - record.owner_started) < 0.01:
            return f"another mlra process (pid {record.owner_pid}) is grading this run now"
    victims: list[psutil.Process] = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if proc.environ().get(GRADER_VAR) != record.token:
                continue
            if proc.create_time() < record.started - 1.0:
                continue
        except psutil.Error:
            continue
        victims.append(proc)
    for proc in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            pgid = os.getpgid(proc.pid)
            if pgid != os.getpgid(0):
                os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(victims, timeout=5.0)
    path.unlink(missing_ok=True)
    return None
