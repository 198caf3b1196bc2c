"""Batch reports read the experiments table (issue 16): each group's best validation
score and experiments a run, in report.md, .csv and .json, and validation.png, the
validation score over time per run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog
from mlra.agent.record.run_result import RunResult, write_result
from mlra.agent.record.state import RunState
from mlra.batch.report import REPORT_FILES, write_report


def experiment_run(
    runs: Path,
    name: str,
    scores: list[float | None],
    *,
    model: str = "m",
    score: float = 0.5,
    baseline: float | None = None,
    top: float | None = None,
) -> Path:
    """A finished run that validated once per score (None: a failed validation), each
    validation followed by its row as the controller writes it; accuracy, higher better."""
    run_dir = runs / name
    log = EventLog(run_dir / EVENTS_FILE)
    state = RunState()
    log.subscribe(state.apply)

    def append(t: float, event: ev.Event) -> ev.Event:
        event.t = t
        written = log.append(event)
        if isinstance(written, ev.Validation):
            row = state.experiments.next_row(written)
            row.t = t
            log.append(row)
        return written

    sandbox = ev.SandboxInfo(
        kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/w"
    )
    append(
        0,
        ev.RunStarted(
            run_id=name,
            task="answer",
            task_title="A",
            model=model,
            limits=ev.Limits(time_limit_s=3600),
            sandbox=sandbox,
        ),
    )
    for i, value in enumerate(scores):
        t = 300.0 * (i + 1)
        append(t - 60, ev.ExperimentNote(hypothesis=f"idea {i + 1}"))
        append(
            t,
            ev.Validation(
                artifact="answer.txt",
                ok=value is not None,
                metric="accuracy",
                score=value,
                error=None if value is not None else "no answer",
            ),
        )
    end = 300.0 * (len(scores) + 1)
    append(end, ev.Submission(path="answer.txt"))
    append(
        end,
        ev.EvaluationFinished(
            ok=True, metric="exact_match", score=score, normalized=score, baseline=baseline, top=top
        ),
    )
    append(end, ev.RunFinished(status="finished", reason="submitted"))
    log.close()
    write_result(state, run_dir)
    return run_dir


def test_result_json_holds_the_best_validation_and_the_curve(tmp_path: Path) -> None:
    run_dir = experiment_run(tmp_path, "r", [0.4, None, 0.7, 0.6])
    result = RunResult.model_validate_json((run_dir / "result.json").read_bytes())
    assert result.experiments == 4 and result.best_validation == 0.7
    assert result.validation_metric == "accuracy" and result.validation_higher_is_better
    assert result.validation_curve == [(300.0, 0.4), (900.0, 0.7), (1200.0, 0.6)]


def test_the_report_has_validation_columns_and_plot(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    experiment_run(runs, "a1", [0.4, 0.7], model="alpha")
    experiment_run(runs, "a2", [0.5, None, 0.9, 0.8], model="alpha")
    experiment_run(runs, "b1", [], model="beta")
    write_report(tmp_path)

    md = (tmp_path / "report.md").read_text().splitlines()
    header = next(line for line in md if line.startswith("| task |"))
    assert "| normalized | best validation | experiments | success |" in header
    rows = {line.split(" | ")[1]: line for line in md if line.startswith("| answer |")}
    assert "| 0.8000 ± 0.1000 | 3 |" in rows["alpha"]
    assert "| – | 0 |" in rows["beta"]

    with open(tmp_path / "report.csv", encoding="utf-8") as f:
        groups = {g["model"]: g for g in csv.DictReader(f)}
    assert float(groups["alpha"]["best_validation_mean"]) == 0.8
    assert float(groups["alpha"]["experiments_mean"]) == 3.0
    assert groups["beta"]["best_validation_mean"] == ""

    report = json.loads((tmp_path / "report.json").read_text())
    by_run = {r["run_id"]: r for r in report["runs"]}
    assert by_run["a2"]["experiments"] == 4 and by_run["a2"]["best_validation"] == 0.9
    assert by_run["a2"]["validation_curve"] == [[300.0, 0.5], [900.0, 0.9], [1200.0, 0.8]]

    assert "validation.png" in REPORT_FILES
    assert (tmp_path / "validation.png").read_bytes()[:4] == b"\x89PNG"


def test_the_validation_plot_is_written_when_no_run_validated(tmp_path: Path) -> None:
    experiment_run(tmp_path / "runs", "b1", [], model="beta")
    write_report(tmp_path)
    for name in REPORT_FILES:
        assert (tmp_path / name).stat().st_size > 0, name
