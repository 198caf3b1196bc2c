"""A run folder read as one row of `mlra runs`: its outcome, from result.json where that
is still what its log says, else folded from the log.

Apart from the table (console/cli/runs_cli.py) because this is the checking half: a digest
binds result.json to the log's bytes, and its claims are checked against the few events
they come from, so an edited result or a rewritten log shows as `result≠log`, never as
the run's outcome. A folder that cannot be read is a damaged row, not an error.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class RunRow:
    id: str
    task: str = ""
    """Its task's name; in `list_runs`, where another run of the folder ran another task
    of that name, the end of its task folder's path (`mlagentbench/answer`)."""
    model: str = ""
    status: str = "damaged"
    reason: str = ""
    """Why the run ended (`submitted`, `deadline`, `no_submission`, ...)."""
    score: float | None = None
    """The run's own score; a later `mlra eval` is a re-grade, shown beside it."""
    higher_is_better: bool | None = None
    """The score's direction, as the grading recorded it (`--sort score` goes by it)."""
    normalized_score: float | None = None
    success: bool | None = None
    success_bar: str | None = None
    """The task's success rule and its bar in words, as the grading recorded it."""
    self_reported: str | None = None
    """Why the score is the workspace's own report, not a measurement (marked `^`)."""
    duration_s: float | None = None
    tokens: int | None = None
    tokens_estimated: bool = False
    """Some of `tokens` (and the cost) are mlra's estimates, not the server's counts:
    shown "~4.5k"."""
    cost_usd: float | None = None
    forked_from: str | None = None
    annotations: int = 0
    """People's notes on the run's steps (annotations.jsonl, `mlra annotate`)."""
    run_dir: str = ""
    problem: str | None = None
    isolation: str | None = None
    """The sandbox isolation the run had; "none" makes its score unisolated."""
    result_mismatch: bool = False
    """result.json says other than its log (the log was rewritten, or the result
    edited): the row shows what the log says."""
    earlier_score: float | None = None
    """The score of an ending the run was resumed past (result.json's `earlier_grade`):
    in the JSON rows only, never in `score`, which is the run's ending's as it is now."""
    regrades: int = 0
    """How often the run was graded again after it ended (`mlra eval`)."""
    regrade_score: float | None = None
    """The latest re-grade's score, and what it graded (a workspace path, or the
    frozen submission again)."""
    regrade_artifact: str | None = None
    experiments: int = 0
    """Rows of the run's experiments table (one per validation)."""
    best_validation: float | None = None
    """The best validation score (the validation split, never the hidden test split)."""
    attempts: dict[str, Any] | None = None
    """A search's attempts as result.json has them (`AttemptsSummary`: tried and how
    each ended, best, best_validation, submitted, submitted_validation, test_score,
    validation_to_test_gap); None for a run with one line of work."""
    worker_alone: str | None = None
    """Why the worker did the task alone (result.json's `worker_alone`): the model column
    says "worker alone"; None where the supervisor led."""
    graded_unsubmitted: bool = False
    """The graded attempt was not submitted: the run ended (a deadline, a budget, a stop)
    with nothing submitted and its best validated attempt was graded instead."""
    budget_memory_mb: int | None = None
    """The run's budget (`run_started`): memory and disk of everything it starts together."""
    budget_disk_mb: int | None = None
    used_memory_mb: float | None = None
    """The whole run's memory at its last resource sample (its cgroup's; its commands'
    where none held it): for a running run, its use now."""
    used_disk_mb: float | None = None
    """Its workspace and its attempts' folders at the last sample."""
    started: float | None = None
    """When the run started (its `run_started`'s clock, seconds since the epoch)."""
    log_shortened: bool = False
    """Its log neared its size budget and was shortened from there (result.json's
    `log_shortened`, agent/record/log_budget.py)."""
    live: bool = False
    """Running and serving its controls now (control.sock answers): `mlra attach` and
    `mlra ctl` reach it. A running run that does not answer (killed, an older mlra) is
    not live."""

    @property
    def unisolated(self) -> bool:
        return self.isolation == "none"

    @property
    def running(self) -> bool:
        """Still going, or cut off before it ended: it has no ending yet."""
        return self.status in ("running", "interrupted")


_OUTCOME_TYPES = frozenset(
    {
        b"run_started",
        b"run_finished",
        b"run_resumed",
        b"run_forked",
        b"evaluation_started",
        b"evaluation_finished",
        b"submission",
        b"attempt_started",
        b"attempt_finished",
    }
)
_CLAIMS = (
    "run_id",
    "task",
    "model",
    "status",
    "reason",
    "metric",
    "score",
    "normalized_score",
    "success",
    "isolation",
    "forked_from",
    "resumed",
    "regrades",
    "attempts",
)
"""The fields of result.json a reader takes as the run's outcome; each must be what
the log says (a search's numbers too: an edited best validation or gap is caught)."""


def _check_claims(log: Path, data: bytes, result: Any) -> str | None:
    """Where result.json and its (unchanged) log disagree on the outcome, or None.

    A digest binds result.json to the log's bytes, not to what result.json says,
    so its outcome is checked against the log too. Only the few events the outcome
    comes from are parsed (a run's log can hold 100,000 events); the rest are
    checked for their numbering only (`check_lines`), so a listing stays quick.
    Where they agree, `result` takes the log's search counts: a result.json written
    before a count existed lacks it, and its `tried` would not add up.
    """
    from mlra.agent.record.eventlog import check_lines
    from mlra.agent.record.run_result import as_read_with, result_of
    from mlra.agent.record.state import RunState
    from mlra.events import parse_event

    lines = data.split(b"\n")
    lines.pop()  # the torn tail, or b""
    state = RunState()
    for line in lines:
        if not line.strip():
            continue
        i = line.find(b'"type":"') + 8
        name = line[i : line.find(b'"', i)] if i >= 8 else b"?"
        if name in _OUTCOME_TYPES:
            state.apply(parse_event(line))
    check_lines(log, lines)
    derived = result_of(state)
    as_read_with(result, state)
    for name in _CLAIMS:
        claimed, actual = getattr(result, name), getattr(derived, name)
        if name == "attempts" and claimed is not None and actual is not None:
            # A result.json from before a count (`out_of_time`, `stopped`, ...) is
            # checked on what it says; the listing takes the log's counts, whole.
            said = claimed.model_fields_set
            claimed, actual = claimed.model_dump(include=said), actual.model_dump(include=said)
        if claimed != actual:
            return f"result.json says {name} {claimed!r}, the log {actual!r}"
    result.attempts = derived.attempts
    return None


def _isolation_of(log: Path) -> str | None:
    """The isolation its `run_started` (the log's first line) names, if it does."""
    from mlra import events as ev

    with open(log, "rb") as f:
        first = f.readline()
    try:
        started = ev.parse_event(first)
    except ValueError:  # pydantic's ValidationError is one
        return None
    return started.sandbox.isolation if isinstance(started, ev.RunStarted) else None


def run_row(run_dir: Path) -> RunRow:
    """One run's line; a run that cannot be read is listed as damaged, not raised.

    result.json is derived from the log and names the log's digest. A log that
    has grown since (a resume) wins over it; a log that is no longer the one the
    result was derived from, or a result that says other than its log, is marked
    `result≠log`, and the row shows what the log says.
    """
    from pydantic import ValidationError

    from mlra.agent.record.eventlog import EVENTS_FILE, LogDamage, log_is_live, read_events
    from mlra.agent.record.run_result import RunResult, listed_status, result_of
    from mlra.agent.record.state import fold

    row = RunRow(id=run_dir.name, run_dir=str(run_dir))
    row.annotations = _annotations(run_dir)
    log, result_file = run_dir / EVENTS_FILE, run_dir / "result.json"
    try:
        running = log_is_live(log)
        stored: RunResult | None = None
        use_result = False
        if result_file.is_file() and not running:
            stored = RunResult.model_validate_json(result_file.read_bytes())
            if not log.is_file():
                use_result = True
            elif stored.log_sha256 is None:  # written before results named their log
                use_result = result_file.stat().st_mtime >= log.stat().st_mtime
            else:
                data = log.read_bytes()
                size, bound = len(data), stored.log_size or 0
                if size == bound and hashlib.sha256(data).hexdigest() == stored.log_sha256:
                    problem = _check_claims(log, data, stored)
                    row.result_mismatch = problem is not None
                    row.problem = problem
                    use_result = problem is None
                elif size > bound and hashlib.sha256(data[:bound]).hexdigest() == stored.log_sha256:
                    pass  # appended to since (resumed, evaluated again): the log wins
                else:
                    row.result_mismatch = True
                    row.problem = "result.json was derived from another events.jsonl"
        if use_result and stored is not None:
            result = stored
            status = result.status
            if result.isolation is None and log.is_file():  # a result.json from before
                result.isolation = _isolation_of(log)
        else:
            state = fold(read_events(log))
            if not state.run_id and not state.task:
                raise ValueError("the log has no run_started event")
            result = result_of(state)
            status = listed_status(state, running)
    except (OSError, ValueError, ValidationError, LogDamage) as exc:
        row.status = "damaged"
        row.problem = str(exc).splitlines()[0][:200]
        return row
    row.task, row.model, row.status = result.task, result.model, status
    if status == "running":
        from mlra.control_socket import is_live

        row.live = is_live(run_dir)
    row.reason = "" if status in ("running", "interrupted") else result.reason
    row.score, row.normalized_score = result.score, result.normalized_score
    row.higher_is_better = result.higher_is_better
    row.success, row.success_bar = result.success, result.success_bar
    row.self_reported = result.self_reported
    row.earlier_score = result.earlier_grade.score if result.earlier_grade else None
    if result.regrades:
        latest = result.regrades[-1]
        row.regrades, row.regrade_score = len(result.regrades), latest.score
        row.regrade_artifact = latest.artifact
    row.duration_s, row.cost_usd = result.duration_s, result.cost_usd
    row.tokens, row.tokens_estimated = result.tokens, result.tokens_estimated
    row.forked_from = result.forked_from
    row.worker_alone = result.worker_alone
    row.log_shortened = result.log_shortened is not None
    row.isolation = result.isolation
    row.experiments, row.best_validation = result.experiments, result.best_validation
    if log.is_file():
        _budget_use(row, log)
    if result.attempts is not None:
        row.attempts = result.attempts.model_dump()
        row.graded_unsubmitted = graded_unsubmitted(result.reason, result.attempts.submitted)
    return row


TAIL_BYTES = 256 * 1024
"""How much of a log's end is read for its last resource sample."""


def _budget_use(row: RunRow, log: Path) -> None:
    """The budget from the log's first line (`run_started`) and the use from its last
    resource sample within its tail: two reads, never the whole log."""
    from mlra import events as ev

    try:
        with open(log, "rb") as f:
            first = f.readline(TAIL_BYTES)
            f.seek(max(0, log.stat().st_size - TAIL_BYTES))
            tail = f.read(TAIL_BYTES)
        started = ev.parse_event(first)
    except (OSError, ValueError):
        return
    if isinstance(started, ev.RunStarted):
        row.started = started.ts or None
    if isinstance(started, ev.RunStarted) and started.budget is not None:
        row.budget_memory_mb, row.budget_disk_mb = started.budget.memory_mb, started.budget.disk_mb
    for line in reversed(tail.splitlines()):
        if b'"type":"resource_sample"' not in line:
            continue
        try:
            sample = ev.parse_event(line)
        except ValueError:
            continue
        if isinstance(sample, ev.ResourceSample):
            row.used_memory_mb = (
                sample.pool_mem_mb if sample.pool_mem_mb is not None else sample.run_mem_mb
            )
            row.used_disk_mb = sample.pool_disk_mb or sample.disk_workspace_mb
        return


def budget_cell(row: RunRow) -> str:
    """`mem 0.2/10G disk 1.4/38G`: the run's use against its budget (a figure alone
    where only one is known; the memory in use only while the run runs)."""
    if row.budget_memory_mb is None and row.budget_disk_mb is None:
        return "-"
    parts = []
    used_memory = row.used_memory_mb if row.status == "running" else None
    for name, used, limit in (
        ("mem", used_memory, row.budget_memory_mb),
        ("disk", row.used_disk_mb, row.budget_disk_mb),
    ):
        if used is None and limit is None:
            continue
        shown = "none" if limit is None else short_gb(limit)
        parts.append(
            f"{name} {shown}" if used is None else f"{name} {short_gb(used, unit=False)}/{shown}"
        )
    return " ".join(parts)


def short_gb(mb: float, *, unit: bool = True) -> str:
    """Megabytes as a short figure of GB (`0.2`, `38`; `38G` with its unit)."""
    gb = mb / 1024
    text = f"{gb:.0f}" if gb >= 10 else f"{gb:.1f}"
    return text + ("G" if unit else "")


def graded_unsubmitted(reason: str, submitted: str | None) -> bool:
    """Whether a search's graded attempt is its best validated one, graded because the run
    ended with nothing submitted (a submitted attempt ends the run as `submitted`)."""
    return submitted is not None and reason != "submitted"


def search_cell(
    attempts: dict[str, Any] | None, graded_best: bool = False, *, ended: bool = True
) -> str:
    """A search in a cell: `4 tried (2 validated, 1 buggy, 1 out of time), best a2 0.7812,
    sub a2, gap -0.0123`, its counts in the words of every verdict line. The gap is the
    submitted attempt's test score minus its validation score; a run still going (`ended`
    False) has submitted nothing yet, which is not said."""
    from mlra.agent.record.attempt_tree import AttemptsSummary

    if attempts is None:
        return "-"
    a = attempts
    parts = [AttemptsSummary.model_validate(a).in_words]
    if a.get("best") is not None and a.get("best_validation") is not None:
        parts.append(f"best {a['best']} {a['best_validation']:.4g}")
    else:
        parts.append("none validated")
    if a.get("submitted") is not None:
        parts.append(("graded best " if graded_best else "sub ") + str(a["submitted"]))
        if a.get("validation_to_test_gap") is not None:
            parts.append(f"gap {a['validation_to_test_gap']:+.3g}")
    elif ended:
        parts.append("none submitted")
    return ", ".join(parts)


def short_search_cell(
    attempts: dict[str, Any] | None, graded_best: bool = False, *, ended: bool = True
) -> str:
    """A search in a narrow cell: `4 tried, sub a2 0.7812`, how many attempts and which was
    graded, with its validation (the score column beside it has its test score), and the
    best where that is another (`sub a2 0.75, best a3 0.8`). The full cell, some 60 to 90
    characters, cost a 160-column table its search column and those after it."""
    from mlra.agent.record.attempt_tree import AttemptsSummary

    if attempts is None:
        return "-"
    a = AttemptsSummary.model_validate(attempts)
    parts = [f"{a.tried} tried"] + ([f"{a.running} running"] if a.running else [])
    best = f"{a.best} {a.best_validation:.4g}" if a.best and a.best_validation is not None else ""
    if a.submitted is not None:
        score = f" {a.submitted_validation:.4g}" if a.submitted_validation is not None else ""
        parts.append(("graded best " if graded_best else "sub ") + a.submitted + score)
        if best and a.best != a.submitted:
            parts.append(f"best {best}")
        return ", ".join(parts)
    parts.append(f"best {best}" if best else "none validated")
    if ended and best:
        parts.append("none submitted")
    return ", ".join(parts)


def list_runs(runs_dir: Path) -> list[RunRow]:
    from mlra.batch.task_labels import recorded_task, run_task_labels

    folders = sorted(
        p
        for p in runs_dir.iterdir()
        if p.is_dir() and ((p / "events.jsonl").exists() or (p / "result.json").exists())
    )
    rows = [run_row(p) for p in folders]
    # Two folders' tasks of one name are two tasks: each row says which, as a batch
    # would label them (batch/task_labels.py), from what each run's log recorded.
    recorded = {p: t for p in folders if (t := recorded_task(p)) is not None}
    labels = dict(zip(recorded, run_task_labels(list(recorded.values())), strict=True))
    for folder, row in zip(folders, rows, strict=True):
        if folder in labels and row.status != "damaged":
            row.task = labels[folder]
    return rows


def _annotations(run_dir: Path) -> int:
    from mlra.agent.record.annotations import read_annotations

    try:
        return len(read_annotations(run_dir))
    except OSError:
        return 0
