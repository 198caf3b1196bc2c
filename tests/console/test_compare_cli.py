"""`mlra compare` on the command line: the text tables at 80 columns keep every run's
id, status and score; JSON; bad input gets one line and exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

from mlra import events as ev
from tests.batch.compare_runs import compared_run
from tests.conftest import mlra_cli

NARROW = {"COLUMNS": "80", "LINES": "24"}


def _runs(tmp_path: Path, n: int) -> list[Path]:
    runs = tmp_path / "runs"
    return [
        compared_run(
            runs,
            f"20261129-0900{i:02d}-answer-{i:016x}",
            model=f"model-{i % 2}",
            score=0.1 * (i + 1),
            config={"temperature": i / 10},
        )
        for i in range(n)
    ]


def test_no_tui_fits_80_columns_and_keeps_ids_status_and_scores(tmp_path: Path) -> None:
    dirs = _runs(tmp_path, 6)
    proc = mlra_cli(["compare", "runs", "--no-tui"], cwd=tmp_path, env=NARROW)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert max(len(line) for line in out.splitlines()) <= 80
    for d in dirs:
        assert d.name in out
    assert out.count("finished") >= 6
    for score in ("0.1", "0.2", "0.3", "0.4", "0.5", "0.6*"):
        assert score in out.split()
    assert "temperature" in out and "settings alike in every run" in out
    # Two models over the same task: the paired table.
    # Its sides are no letters: the matrix's B is a run (of model-1), not a side.
    assert "paired by model, 2nd against 1st: 1 wins, 0 losses, 0 ties" in out
    assert "1st = model-0" in out and "B = " not in out
    # What the description promises and the text leaves out is said, not silently absent.
    assert out.rstrip().endswith(
        "the curves and diffs are on the screen only (a terminal, no --no-tui)"
    )


def test_json_and_run_ids(tmp_path: Path) -> None:
    dirs = _runs(tmp_path, 2)
    proc = mlra_cli(["compare", dirs[0].name, dirs[1].name[:22], "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["runs"] == [d.name for d in dirs]
    assert data["best"] == [dirs[1].name] and data["best_of"] == "all the runs"
    assert data["paired"][0]["wins"] == 1


def test_json_says_the_best_are_each_tasks_best(tmp_path: Path) -> None:
    """Runs of two tasks: two runs starred, one a task. The text said so under the
    matrix; the JSON listed both as "best", read as a tie by a script."""
    runs = tmp_path / "runs"
    a = compared_run(runs, "a", task="classify", score=0.81, metric="accuracy")
    b = compared_run(runs, "b", task="lm", score=0.59, metric="pair_accuracy")
    proc = mlra_cli(["compare", str(a), str(b), "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["best"] == ["a", "b"] and data["metric"] == "score"
    assert data["best_of"] == "of each task's runs, each in its task's metric"


def test_one_tasks_metric_does_not_label_another_tasks_unscored_runs(tmp_path: Path) -> None:
    """Runs of two tasks, only one graded: the score row read `accuracy ↑` over the
    other task's empty cell, as if its run had an accuracy it did not reach."""
    runs = tmp_path / "runs"
    a = compared_run(runs, "a", task="classify", score=0.81, metric="accuracy")
    b = compared_run(runs, "b", task="lm", finished=False)
    proc = mlra_cli(["compare", str(a), str(b), "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["metric"] == "score" and "accuracy" not in json.dumps(data["rows"])
    assert data["best_of"] == "of each task's runs, each in its task's metric"
    assert {"name": "score", "section": "outcome", "cells": ["0.81*", "-"]} in data["rows"]


def test_bad_input_one_line_exit_2(tmp_path: Path) -> None:
    dirs = _runs(tmp_path, 2)
    for args, said in (
        (["compare", "nope", dirs[0].name], "no run 'nope': not a folder, nor a run id"),
        (["compare", dirs[0].name], "at least 2 runs"),
        (["compare", "runs", "--metric", "bleu"], "unknown metric 'bleu'"),
    ):
        proc = mlra_cli([*args, "--no-tui"], cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout
        assert said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_runs_text_is_printed_escaped(tmp_path: Path) -> None:
    """A model's name with a terminal escape and Rich markup prints as text."""
    runs = tmp_path / "runs"
    compared_run(runs, "a", model="m\x1b]0;pwned\x07[bold red]x[/]")
    compared_run(runs, "b")
    proc = mlra_cli(["compare", "runs", "--no-tui"], cwd=tmp_path, env=NARROW)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    assert "[bold red]x" in proc.stdout


def test_mlra_runs_opens_the_comparison_of_the_runs_it_lists(tmp_path: Path) -> None:
    """Runs picked in `mlra runs` (filtered, sorted, the first N) are compared: a pipe
    gets the text tables, as `mlra compare --no-tui` prints them."""
    dirs = _runs(tmp_path, 4)
    proc = mlra_cli(["runs", "--sort", "score", "--compare", "2"], cwd=tmp_path, env=NARROW)
    assert proc.returncode == 0, proc.stderr
    # The two best scores (sorted best first), and no other run.
    assert dirs[3].name in proc.stdout and dirs[2].name in proc.stdout
    assert dirs[0].name not in proc.stdout and dirs[1].name not in proc.stdout
    assert "0.4*" in proc.stdout.split()
    only_one = mlra_cli(
        ["runs", "--model", "model-0", "--sort", "score", "--compare"], cwd=tmp_path
    )
    assert only_one.returncode == 0, only_one.stderr  # model-0's two runs
    assert dirs[0].name in only_one.stdout and dirs[2].name in only_one.stdout
    for args, said in (
        (["runs", "--task", "nothing", "--compare"], "0 run listed"),
        (["runs", "--compare", "1"], "N must be 2 to 10"),
    ):
        proc = mlra_cli(args, cwd=tmp_path)
        assert proc.returncode == 2 and said in proc.stderr, (proc.stdout, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1


def test_a_wide_terminal_shows_whole_models_and_the_scores_direction(tmp_path: Path) -> None:
    """Two runs of models whose names differ only past 22 characters read apart where the
    terminal has room (both were `openai/qwen2.5-coder-…` at 150 columns), and the score
    row keeps its direction however narrow: its name is the metric's, cut before its
    arrow."""
    runs = tmp_path / "runs"
    models = ("openai/qwen2.5-coder-0.5b-instruct", "openai/qwen2.5-coder-1.5b-instruct")
    for i, model in enumerate(models):
        compared_run(
            runs, f"r{i}", model=model, metric="minimal_pair_accuracy", score=0.7 + i / 100
        )
    wide = mlra_cli(["compare", "runs", "--no-tui"], cwd=tmp_path, env={"COLUMNS": "150"})
    assert wide.returncode == 0, wide.stderr
    assert all(m in wide.stdout for m in models), wide.stdout
    assert "minimal_pair_accuracy ↑  0.7  " in wide.stdout, wide.stdout
    narrow = mlra_cli(["compare", "runs", "--no-tui"], cwd=tmp_path, env=NARROW)
    assert narrow.returncode == 0, narrow.stderr
    score_row = next(ln for ln in narrow.stdout.splitlines() if ln.startswith("minimal_pair"))
    assert "… ↑" in score_row and "0.71*" in score_row.split(), narrow.stdout


def test_a_curve_named_as_neither_loss_nor_score_takes_its_direction_from_its_values(
    tmp_path: Path,
) -> None:
    """tiny-lm's recipe prints its validation loss as `valid` (5.2 falling to 4.5):
    `--metric valid` said `valid ↑` and starred the run whose loss was higher, while
    the curves drew it in the loss panel. Both now take one rule."""
    runs = tmp_path / "runs"
    for name, last in (("a", 4.48), ("b", 4.563)):
        points = [ev.MetricPoint(name="valid", value=v, step=100 * (i + 1), wall=10.0 * (i + 1))
                  for i, v in enumerate((5.2, 4.7, last))]  # fmt: skip
        compared_run(runs, name, more=(ev.Metrics(source="job:j1", job="j1", points=points),))
    proc = mlra_cli(["compare", "runs", "--metric", "valid", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["metric"] == "valid ↓" and data["best"] == ["a"], data


def test_the_time_limit_is_the_one_each_run_ran_under_and_where_it_came_from(
    tmp_path: Path,
) -> None:
    """A run under its task's 20m limit compared as `time_limit_s null 600.0`: "null"
    read as no limit at all."""
    runs = tmp_path / "runs"
    compared_run(runs, "tasks-limit", time_limit_s=1200)
    compared_run(runs, "flags-limit", time_limit_s=600, config={"time_limit_s": 600.0})
    proc = mlra_cli(["compare", "runs/tasks-limit", "runs/flags-limit"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (row,) = [line for line in proc.stdout.splitlines() if line.startswith("time_limit")]
    assert row.split() == ["time_limit", "20m00s", "(task)", "10m00s", "(--time-limit)"]
    assert "null" not in proc.stdout
