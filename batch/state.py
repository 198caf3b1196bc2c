"""A batch's state, derived from its run folders alone.

The batch keeps no state file of its own: whether a run is done, live, dead
mid-way or failed is read from its event log (and the log's lock, which a live
run holds), and how often it was tried from the folders of earlier attempts. So
a batch killed at any moment is resumed by running the same command again.

Layout of a batch folder:

    runs/<run-id>/           the current attempt of each run (an ordinary run folder)
    retired/<run-id>__a<n>/  earlier attempts that failed and were retried
    logs/<run-id>.log        what `mlra run` printed, all attempts
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mlra import events as ev
from mlra.agent.eventlog import EVENTS_FILE, LogDamage, log_is_live, read_events
from mlra.agent.state import fold

RUNS, RETIRED, LOGS = "runs", "retired", "logs"

Kind = Literal["pending", "running", "finished", "failed", "interrupted"]


@dataclass
class RunStatus:
    run_id: str
    kind: Kind
    reason: str = ""
    """Why a run failed or did not finish (`error`, `budget`, `no score`, ...)."""
    detail: str = ""
    attempts: int = 0
    """Starts so far: retired attempts, the current one and its resumes."""
    cost_usd: float = 0.0
    score: float | None = None


def retired_attempts(out: Path, run_id: str) -> list[Path]:
    folder = out / RETIRED
    if not folder.is_dir():
        return []
    return sorted(folder.glob(f"{run_id}__a*"), key=lambda p: int(p.name.rsplit("__a", 1)[1]))


def run_status(out: Path, run_id: str) -> RunStatus:
    earlier = len(retired_attempts(out, run_id))
    run_dir = out / RUNS / run_id
    log = run_dir / EVENTS_FILE
    if not log.is_file():
        if run_dir.exists():
            return RunStatus(run_id, "failed", "error", "no event log", attempts=earlier + 1)
        return RunStatus(run_id, "pending", attempts=earlier)
    live = log_is_live(log)
    try:
        events = read_events(log)
    except LogDamage as exc:
        return RunStatus(run_id, "failed", "error", str(exc), attempts=earlier + 1)
    resumes = sum(isinstance(e, ev.RunResumed) for e in events)
    state = fold(events)
    attempts = earlier + 1 + resumes
    status = RunStatus(run_id, "running", attempts=attempts, cost_usd=state.cost_usd)
    if live:
        return status
    finished, evaluation = state.finished, state.evaluation
    if finished is None:
        status.kind, status.reason = "interrupted", "unfinished"
    elif finished.status == "stopped" and finished.reason == "stopped" and evaluation is None:
        # Stopped without evaluating: what a batch's Ctrl-C does to its runs.
        status.kind, status.reason = "interrupted", "stopped"
    elif finished.status == "finished" and evaluation is not None and evaluation.score is not None:
        status.kind, status.score = "finished", evaluation.score
    else:
        status.kind = "failed"
        if finished.status != "finished":
            status.reason, status.detail = finished.reason, finished.message
        else:
            status.reason = "no score"
            status.detail = (evaluation.error if evaluation else None) or finished.message
    return status


def batch_status(out: Path, run_ids: list[str]) -> dict[str, RunStatus]:
    return {run_id: run_status(out, run_id) for run_id in run_ids}


def retire(out: Path, run_id: str) -> Path:
    """Move a failed attempt aside so the run can start afresh under its own id."""
    n = len(retired_attempts(out, run_id)) + 1
    target = out / RETIRED / f"{run_id}__a{n}"
    target.parent.mkdir(parents=True, exist_ok=True)
    (out / RUNS / run_id).rename(target)
    return target
