"""What an export carries of a run, read from its folder alone: the same for every
tracker, so MLflow, W&B and TensorBoard hold one run's numbers alike.

A run is its parameters (from `run_started`: task, model, limits, seed, search, the
rest of its config), its curves (its `metrics` events, batch/curves.py), its one-off
numbers, its validations, its final score (`result.json`, else its log folded) and its
artifacts (result.json, a text transcript, the event log). Runs are grouped as researchers
group them: one experiment per task (`by_task`), whether they came one by one or in a
batch (whose name each run keeps as its `batch` tag), so a second run of a task exported
later lands beside the first; a searching run brings each attempt (`attempts/<id>/`, a
run folder of its own) as a child run of the same experiment, tied to its parent run.

A series whose values never change in any run of the experiment (tiny-lm's `d=128`,
`layers=2`, `tokenizer: 2048 tokens`, printed once; agent/metrics/one_off.py's rule,
batch/curves.py's `curve_names`) is no curve: a tracker would give it a chart of one dot
beside the loss. It is carried as one of the run's single numbers (`one_offs`: its last
value, kept as each tracker keeps such numbers) under its own name, so a column `d`
compares the runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mlra import events as ev
from mlra.agent.loop.attempts import ATTEMPTS_DIR
from mlra.agent.record.eventlog import EVENTS_FILE, LogDamage, log_is_live, read_events
from mlra.agent.record.run_result import RunResult, as_read_with, result_of, stands_for_log
from mlra.agent.record.state import RunState, fold
from mlra.batch.compare.runs import NOT_SETTINGS, SEARCH_ONLY
from mlra.batch.curves import (
    Point,
    Series,
    attempt_events,
    curve_names,
    graded_attempt,
    run_series,
    source_label,
    validation_points,
)
from mlra.batch.export.endings import Ended, ended, notes
from mlra.batch.report_judged import killed_for_memory
from mlra.batch.state import RUNS, read_placements
from mlra.batch.task_labels import RecordedTask, label_beside, run_task_labels

Transcript = Callable[[list[ev.Event], Path], str]
"""A run's events as the text transcript `mlra replay --no-tui` prints (given by the
console, whose display it is: this layer cannot import it)."""

Param = str | int | float | bool


class NotARun(ValueError):
    """The path is no run folder, batch folder or folder of runs (one line for the user)."""


@dataclass
class Artifact:
    name: str
    """Its name in the tracker (`result.json`, `transcript.txt`, `events.jsonl`)."""
    path: Path | None = None
    text: str | None = None
    """Made for the export (the transcript), where it is no file of the run."""


@dataclass
class ExportRun:
    name: str
    """The run id (an attempt: `<run id>/<attempt id>`)."""
    params: dict[str, Param]
    series: list[Series]
    """Its curves (once `read_experiment` has set the one-off numbers apart)."""
    validations: list[Series]
    """Validation scores over the run clock (step = the validation's number)."""
    final: dict[str, float]
    """`score`, `normalized_score`, the evaluator's other metrics: one value each."""
    artifacts: list[Artifact]
    started_ts: float
    """Wall-clock epoch seconds of the run's start: a point's time is this plus its wall."""
    ended: Ended
    """How it ended, as the trackers tell endings (batch/export/endings.py)."""
    parent: str | None = None
    """An attempt's run (its `name`), else None."""
    tags: dict[str, str] = field(default_factory=dict)
    task: str = ""
    """Its task as the runs exported with it tell it apart (`read_experiment`): its name,
    or where another of them ran another task of that name, the end of its folder's path
    (`mlrc/answer`); empty until labelled."""
    recorded: RecordedTask | None = None
    """Its task as its log's `run_started` recorded it (name, folder)."""
    one_offs: dict[str, Point] = field(default_factory=dict)
    """Numbers its scripts printed or wrote that are no curve: each its last reading,
    named as its series (`<source>/<name>` where a final number or a parameter of the
    run has that name)."""
    notes: str = ""
    """Its ending in a sentence (W&B's notes on the run)."""
    ungraded: str | None = None
    """Why it was run `--ungraded` (this machine could not grade its task); None: graded."""


def set_one_offs_apart(runs: list[ExportRun]) -> None:
    """Move each run's one-off numbers from `series` to `one_offs`: a name is a curve in
    every run of the experiment or in none, so one chart holds every run's `loss`."""
    curves = curve_names(r.series for r in runs)
    for run in runs:
        taken = set(run.final) | set(run.params)
        for s in run.series:
            if s.name in curves or not s.points:
                continue
            key = s.name if s.name not in taken else f"{source_label(s.source)}/{s.name}"
            run.one_offs[key] = s.points[-1]
        run.series = [s for s in run.series if s.name in curves]


@dataclass
class Experiment:
    name: str
    """Its runs' task (`by_task`), which each tracker names in its own way; the folder's
    name where `read_experiment` has not grouped them yet."""
    runs: list[ExportRun]


def by_task(experiment: Experiment) -> list[Experiment]:
    """One experiment per task, in the order the tasks first appear: the unit a
    researcher compares runs in. An attempt goes with its run, whatever it recorded; two
    tasks of one name are two experiments, each named by its label (`ExportRun.task`)."""
    task_of: dict[str, str] = {}
    groups: dict[str, list[ExportRun]] = {}
    for run in experiment.runs:
        if run.parent is not None and run.parent in task_of:
            task = task_of[run.parent]
        else:
            task = run.task or str(run.params.get("task") or "unknown")
        task_of[run.name] = task
        groups.setdefault(task, []).append(run)
    return [Experiment(task, runs) for task, runs in groups.items()]


def _params(started: ev.RunStarted | None, result: RunResult, state: RunState) -> dict[str, Param]:
    params: dict[str, Param] = {"task": result.task, "model": result.model}
    if started is None:
        return params
    params["task_title"] = started.task_title
    # the limits it ran under: a resume's or a fork's (`--time-limit`) over run_started's
    for key, value in (state.limits or started.limits).model_dump().items():
        if value is not None:
            params[key] = value
    config = {**started.config, **state.settings_changed}
    if config.get("search", "none") == "none":  # a search's settings, read by none else:
        config = {k: v for k, v in config.items() if k not in SEARCH_ONLY}  # not `attempts 4`
    for key in ("seed", "search", "attempts", "attempts_parallel"):
        if config.get(key) is not None:
            params[key] = config[key]
    params["isolation"] = started.sandbox.isolation
    if started.mlra_version:
        params["mlra_version"] = started.mlra_version
    for key, value in sorted(config.items()):
        if key in NOT_SETTINGS:  # where it was written: a fork's named its source's id
            continue
        if isinstance(value, str | int | float | bool) and key not in params:
            params[f"config.{key}"] = value
    return params


def _final(result: RunResult) -> dict[str, float]:
    final: dict[str, float] = {}
    if result.score is not None:
        final["score"] = result.score
    if result.normalized_score is not None:
        final["normalized_score"] = result.normalized_score
    for key, value in sorted(result.metrics.items()):
        final.setdefault(f"eval/{key}", value)
    final["duration_s"] = result.duration_s
    final["tokens"] = float(result.tokens)
    final["cost_usd"] = result.cost_usd
    return final


def _validations(events: list[ev.Event], since: float = 0.0) -> list[Series]:
    """`since`: run-clock seconds added to each point's (an attempt's on its search's)."""
    score = Series("validation/score", "validation")
    normalized = Series("validation/normalized", "validation")
    for n, (t, v) in enumerate(validation_points(events), start=1):
        if v.metric:
            score.name = f"validation/{v.metric}"
        assert v.score is not None  # validation_points keeps the graded ones
        score.points.append(Point(v.score, n, since + t))
        if v.normalized is not None:
            normalized.points.append(Point(v.normalized, n, since + t))
    return [s for s in (score, normalized) if s.points]


def _graded_attempts_curves(run: ExportRun, folder: Path, state: RunState) -> None:
    """A search's curves and validations, which its own log holds none of: those of the
    attempt it submitted or graded (batch/curves.py `graded_attempt`, as `mlra compare`
    draws a search), from that attempt's log, on the search's clock, so the search's
    own run shows what was handed in beside the other runs' curves. Its tags name it."""
    graded = graded_attempt(state)
    if graded is None or run.series or run.validations:
        return
    node, why = graded
    events = attempt_events(folder, node, (b"metrics", b"validation"))
    if not events:
        return
    run.series = run_series(e for e in events if isinstance(e, ev.Metrics))
    for series in run.series:
        for point in series.points:
            point.wall += node.started.t
    run.validations = _validations(events, since=node.started.t)
    run.tags["curves_of"] = f"{why} attempt {node.id}"


def _best_validation(result: RunResult, attempt: bool) -> dict[str, str]:
    """An attempt's best validation score, as a tag: it has no test score of its own."""
    if not attempt or result.best_validation is None:
        return {}
    return {"best_validation": f"{result.best_validation:g}"}


def read_run(folder: Path, name: str, transcript: Transcript | None) -> ExportRun:
    """One run folder as an export carries it."""
    try:
        events = read_events(folder / EVENTS_FILE)
    except (OSError, LogDamage) as exc:
        raise NotARun(f"{folder}: its event log cannot be read ({exc})") from None
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    result_file = folder / "result.json"
    state = fold(events)
    result = None
    if result_file.is_file():
        result = RunResult.model_validate_json(result_file.read_text(encoding="utf-8"))
        if not stands_for_log(result, result_file, folder / EVENTS_FILE):
            result = None  # appended to since (a resume): the log says how the run stands
        else:
            result = as_read_with(result, state)
    artifacts = [Artifact("events.jsonl", path=folder / EVENTS_FILE)]
    if result is None:
        result = result_of(state, running=log_is_live(folder / EVENTS_FILE))
    else:
        artifacts.insert(0, Artifact("result.json", path=result_file))
    if transcript is not None:
        artifacts.append(Artifact("transcript.txt", text=transcript(events, folder)))
    attempt = state.attempt or folder.parent.name == ATTEMPTS_DIR
    end = ended(result, attempt=attempt, oom=killed_for_memory(read_placements(folder)))
    run = ExportRun(
        recorded=(started.task, started.task_dir) if started is not None else None,
        name=name,
        params=_params(started, result, state),
        series=run_series(events),
        validations=_validations(events),
        final=_final(result),
        artifacts=artifacts,
        started_ts=events[0].ts if events else 0.0,
        tags={"status": result.status, "reason": result.reason}
        | ({"forked_from": result.forked_from} if result.forked_from else {})
        | _best_validation(result, attempt),
        ended=end,
        notes=notes(result, end),
        ungraded=result.ungraded,
    )
    _graded_attempts_curves(run, folder, state)
    return run


def _with_attempts(folder: Path, name: str, transcript: Transcript | None) -> list[ExportRun]:
    runs = [read_run(folder, name, transcript)]
    attempts = folder / ATTEMPTS_DIR
    if attempts.is_dir():
        for sub in sorted(attempts.iterdir()):
            if (sub / EVENTS_FILE).is_file():
                child = read_run(sub, f"{name}/{sub.name}", transcript)
                child.parent = name
                child.tags["attempt"] = sub.name
                runs.append(child)
    return runs


def _label(run: ExportRun, label: str | None) -> None:
    """Give the run its task's label; where that is not the task's name (another task of
    the name is exported beside it), it is a parameter too (`task_label`)."""
    if label is None:
        return
    run.task = label
    if label != run.params.get("task"):
        run.params["task_label"] = label


def read_experiment(path: Path, transcript: Transcript | None = None) -> Experiment:
    """A run folder (with its attempts), a batch folder (every run in `runs/`) or a plain
    folder of run folders (`./runs`, as `mlra compare`, `report` and `share` take it) as
    one experiment; `NotARun` where it is none of them."""
    path = path.resolve()
    if (path / EVENTS_FILE).is_file():
        runs = _with_attempts(path, path.name, transcript)
        # Called as among the runs beside it, so runs of one folder exported one by one
        # land in the experiments they would share exported together.
        _label(runs[0], label_beside(path))
        set_one_offs_apart(runs)
        return Experiment(path.name, runs)
    if not path.is_dir():
        raise NotARun(f"{path} is {'not a folder' if path.exists() else 'not there'}")
    batch = (path / RUNS).is_dir()
    runs: list[ExportRun] = []
    for folder in sorted((path / RUNS if batch else path).iterdir()):
        if (folder / EVENTS_FILE).is_file():
            runs += _with_attempts(folder, folder.name, transcript)
    if batch:
        for run in runs:
            run.tags["batch"] = path.name
    if runs:
        tops = [(r, r.recorded) for r in runs if r.parent is None and r.recorded is not None]
        labels = run_task_labels([recorded for _, recorded in tops])
        for (run, _), label in zip(tops, labels, strict=True):
            _label(run, label)
        set_one_offs_apart(runs)
        return Experiment(path.name, runs)
    if batch:
        raise NotARun(f"{path}: a batch folder with no run in {RUNS}/ yet")
    raise NotARun(
        f"{path} is neither a run folder ({EVENTS_FILE}), a batch folder ({RUNS}/) "
        "nor a folder of run folders"
    )
