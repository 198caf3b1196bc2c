"""The runs a comparison reads: each folder's log folded once, into what every view of
the comparison shows (its outcome, its settings, its prompts, its curves).

Read from the log alone (never result.json), so a run still going compares as it is now
and a run recorded by an older mlra compares with the fields its log has.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlra import events as ev
from mlra.agent.record.attempt_tree import AttemptsSummary
from mlra.agent.record.eventlog import EVENTS_FILE, LogDamage, log_is_live, read_events
from mlra.agent.record.run_result import result_of
from mlra.agent.record.state import RunState, fold
from mlra.batch.curves import (
    Series,
    attempt_metrics,
    graded_attempt,
    run_series,
    validation_points,
)
from mlra.batch.state import RUNS
from mlra.batch.task_labels import run_task_labels
from mlra.durations import format_duration

MAX_RUNS = 10
"""Runs compared at once: columns a person can still read side by side."""


NOT_SETTINGS = frozenset({"run_id", "runs_dir", "task", "model"})
SEARCH_ONLY = frozenset({"attempts", "attempts_parallel"})
"""Settings only a search reads: a run with none showed `attempts 4`, the default."""
"""Config keys that name the run or where it was written, not how it ran (the task and
the model have rows of their own)."""


class CompareError(ValueError):
    """Bad input to a comparison, in one line a person reads."""


@dataclass
class ComparedRun:
    id: str
    run_dir: Path
    task: str = ""
    """The task as the runs compared tell it apart (`load_all`; a batch report's: as its
    rows do): its name, or where another of them ran another task of that name, the end
    of its folder's path. Its name until then."""
    task_name: str = ""
    """The task's own name, as the run recorded it."""
    task_folder: str = ""
    """The task folder the run recorded (`run_started`'s `task_dir`; empty in none)."""
    model: str = ""
    status: str = ""
    """`finished`, `stopped`, `error`, or `running` (its log is held open), or
    `interrupted` (no ending and no writer)."""
    reason: str = ""
    metric: str | None = None
    higher_is_better: bool | None = None
    score: float | None = None
    normalized: float | None = None
    success: bool | None = None
    direction_known: bool = True
    self_reported: bool = False
    metrics: dict[str, float] = field(default_factory=dict)
    """The grading's other numbers (by name), a metric `--metric` may pick."""
    best_validation: float | None = None
    validation_metric: str | None = None
    validation_higher_is_better: bool | None = None
    validations: list[tuple[float, float]] = field(default_factory=list)
    """(run clock seconds, score) of each graded validation, in order."""
    attempts: AttemptsSummary | None = None
    """A search's attempts, as its result counts them (None: one line of work)."""
    duration_s: float = 0.0
    tokens: int = 0
    tokens_estimated: bool = False
    cost_usd: float = 0.0
    settings: dict[str, str] = field(default_factory=dict)
    """`run_started`'s config flattened (`fetch.allow_hosts`), with the mlra version and
    the sandbox's isolation: the rows a settings diff compares."""
    prompts: list[tuple[str, str]] = field(default_factory=list)
    """(who and when, text) of every non-empty prompt the log recorded (`step_started`)."""
    series: list[Series] = field(default_factory=list)
    curves_of: str | None = None
    """The attempt whose curves `series` are: a search's own log holds none (its attempts
    trained), so it is drawn by the attempt it submitted or graded (`curves_why`)."""
    curves_why: str = ""
    """`submitted`, or `graded` (its best validated attempt, at the deadline)."""
    frozen: str | None = None
    """The graded copy of what was submitted, relative to the run folder (`submission`'s
    `frozen`): `submission/<name>`, or a search's attempt's validated copy."""

    @property
    def label(self) -> str:
        """Its id, with the attempt its curves are of where they are an attempt's
        (`<run> (a2)`)."""
        return f"{self.id} ({self.curves_of})" if self.curves_of else self.id

    @property
    def submission_dir(self) -> Path:
        """The folder holding the graded copy: the run's `submission/`, or for a search
        the submitted attempt's (`attempts/a2/validations/1/artifact/`), where a search's
        own `submission/` is empty and its files diffed as all gone."""
        if self.frozen:
            folder = (self.run_dir / self.frozen).parent
            if folder.resolve().is_relative_to(self.run_dir.resolve()):
                return folder
        return self.run_dir / "submission"


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested settings as one row each (`fetch.allow_hosts`), values as short JSON."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return out


def time_limit_setting(started: ev.RunStarted, state: RunState, events: list[ev.Event]) -> str:
    """The limit the run ran under, in the units its header said it in, and where it came
    from: the config's `time_limit_s` is only the flag (None: the task's), so two runs
    compared as `null` and `600.0`, the null read as no limit where the task's 20m held."""
    limits = state.limits or started.limits
    if "time_limit_s" in state.settings_changed:
        raised = any(isinstance(e, ev.TimeLimitRaised) for e in events)
        source = "raised while it ran" if raised else "--time-limit on resume or fork"
    elif started.config.get("time_limit_s") is None:
        source = "task"
    else:
        source = "--time-limit"
    return f"{format_duration(limits.time_limit_s)} ({source})"


def is_run_dir(path: Path) -> bool:
    return (path / EVENTS_FILE).is_file()


def expand(paths: list[Path]) -> list[Path]:
    """Run folders from what was named: a run folder itself, a batch folder (its runs),
    or a folder of runs (each of them); in the order named, each once."""
    out: list[Path] = []
    for path in paths:
        if is_run_dir(path):
            found = [path]
        elif path.is_dir():
            inner = path / RUNS if (path / RUNS).is_dir() else path
            found = sorted(p for p in inner.iterdir() if p.is_dir() and is_run_dir(p))
            if not found:
                raise CompareError(f"{path}: neither a run folder nor a folder of runs")
        else:
            raise CompareError(f"{path}: no such run")
        out += [p for p in found if p.resolve() not in {q.resolve() for q in out}]
    return out


def load(run_dir: Path) -> ComparedRun:
    """One run as compared; a log that cannot be read is a CompareError."""
    log = run_dir / EVENTS_FILE
    try:
        events = read_events(log)
    except (OSError, ValueError, LogDamage) as exc:
        raise CompareError(f"{run_dir}: its log cannot be read: {exc}") from exc
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    if started is None:
        raise CompareError(f"{run_dir}: its log has no run_started event")
    state = fold(events)
    result = result_of(state)
    # the run's own id: a fork's log opens with its source's run_started (`run_forked`
    # names the fork), so the first event's id named the source for both
    run = ComparedRun(id=state.run_id or started.run_id or run_dir.name, run_dir=run_dir)
    run.task, run.model = result.task, result.model
    run.task_name, run.task_folder = result.task, started.task_dir
    if state.finished is not None:
        run.status, run.reason = state.finished.status, state.finished.reason
    else:
        run.status = "running" if log_is_live(log) else "interrupted"
    run.metric, run.higher_is_better = result.metric, result.higher_is_better
    run.score, run.normalized, run.success = result.score, result.normalized_score, result.success
    run.direction_known = result.direction_known
    run.self_reported = bool(result.self_reported) and result.score is not None
    run.metrics = dict(result.metrics)
    run.best_validation, run.validation_metric = result.best_validation, result.validation_metric
    run.validation_higher_is_better = result.validation_higher_is_better
    checks = [v for _, v in validation_points(events) if v.ok and v.split == "validation"]
    run.validations = [(v.t, v.score) for v in checks if v.score is not None]
    if checks and run.validation_metric is None:  # validations no experiment row holds
        run.validation_metric = checks[-1].metric or None
        run.validation_higher_is_better = checks[-1].higher_is_better
        higher = checks[-1].higher_is_better
        scores = [s for _, s in run.validations]
        run.best_validation = max(scores) if higher else min(scores)
    run.attempts = result.attempts
    run.duration_s, run.cost_usd = result.duration_s, result.cost_usd
    run.tokens, run.tokens_estimated = result.tokens, result.tokens_estimated
    config = {**started.config, **state.settings_changed}  # a fork's --time-limit, say
    searched = config.get("search", "none") != "none"
    run.settings = {
        **flatten(
            {
                k: v
                for k, v in config.items()
                if k not in NOT_SETTINGS and (searched or k not in SEARCH_ONLY)
            }
        ),
        "isolation": started.sandbox.isolation,
        "mlra_version": started.mlra_version or "(older)",
    }
    run.settings.pop("time_limit_s", None)
    run.settings["time_limit"] = time_limit_setting(started, state, events)
    run.prompts = [
        (f"{e.agent} step {e.step}", e.prompt)
        for e in events
        if isinstance(e, ev.StepStarted) and e.prompt.strip()
    ]
    run.series = run_series(events)
    run.frozen = state.submission.frozen if state.submission is not None else None
    if not run.series:
        _attempts_curves(run, state)
    return run


def _attempts_curves(run: ComparedRun, state: RunState) -> None:
    """A search's curves: those of the attempt it submitted or graded, from its own log,
    on the search's clock (the attempt's own starts when the search started it)."""
    graded = graded_attempt(state)
    metrics = attempt_metrics(run.run_dir, graded[0]) if graded is not None else None
    if graded is None or not metrics:
        return
    node, run.curves_why = graded
    run.series = run_series(metrics)
    for series in run.series:
        for point in series.points:
            point.wall += node.started.t
    run.curves_of = node.id


def load_all(run_dirs: list[Path]) -> list[ComparedRun]:
    """The runs to compare: at least two, at most `MAX_RUNS`, each task labelled among
    them from what each run recorded (batch/task_labels.py `run_task_labels`), so runs of
    two folders whose tasks share a name are two tasks, whether or not a batch ran them."""
    if len(run_dirs) < 2:
        raise CompareError(f"compare needs at least 2 runs, got {len(run_dirs)}")
    if len(run_dirs) > MAX_RUNS:
        raise CompareError(
            f"compare shows at most {MAX_RUNS} runs side by side, got {len(run_dirs)}: "
            "name fewer (a batch's runs of one task, say)"
        )
    runs = [load(d) for d in run_dirs]
    labels = run_task_labels([(r.task_name, r.task_folder) for r in runs])
    for run, label in zip(runs, labels, strict=True):
        run.task = label
    return runs
