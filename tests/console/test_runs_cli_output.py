"""`mlra runs` as a person reads it: a long model cell (a replay's run folder) is cut
before any column gives way, and the legend comes after the table, off stdout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.batch.test_experiments_report import experiment_run
from tests.console.test_runs_by_priority import _on_a_terminal

SOURCE = "20261201-020315-answer-d944e8e76ef308ee"


def _runs(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    experiment_run(runs, SOURCE, [0.4], model="demo", score=0.5, baseline=0.25, top=1.0)
    experiment_run(
        runs,
        "20261201-020728-answer-db5e510db4888c94",
        [0.7],
        model=f"replay:runs/{SOURCE}",
        score=0.875,
        baseline=0.25,
        top=1.0,
    )
    return runs


def test_a_replay_s_model_is_its_source_s_hash_and_costs_no_columns(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    wide = _on_a_terminal(["runs", "--runs-dir", str(runs)], 160)
    header, *lines = wide.splitlines()
    names = header.split()
    assert {"model", "normalized", "duration", "cost"} <= set(names), wide
    (row,) = [line.split() for line in lines if line.startswith("20261201-020728")]
    assert row[names.index("model")] == "replay:d944e8e76ef308ee"
    narrow = _on_a_terminal(["runs", "--runs-dir", str(runs)], 120)
    names = narrow.splitlines()[0].split()
    assert names[:5] == ["id", "task", "model", "status", "reason"], narrow
    assert all(len(line) <= 120 for line in narrow.splitlines()), narrow


def test_a_long_model_is_cut_in_the_middle_before_columns_go() -> None:
    from mlra.console.text.run_columns import fit_columns

    headers = ["id", "task", "model", "status", "score", "success", "duration", "cost"]
    model = "openai/a-model-name-of-some-forty-characters"
    row = ["r1", "answer", model, "finished", "0.875", "yes", "3m", "$0.10"]
    kept, (cells,) = fit_columns(headers, [row], 90)
    assert kept == headers
    # Cut as much as the width needs, its provider and its name's end kept.
    assert cells[2] == "openai/a-model-na…-forty-characters"


def test_the_legend_follows_the_table_on_stderr(tmp_path: Path) -> None:
    """`mlra runs 2>&1` through a pipe: stdout is held back until flushed, and the
    legend, written to stderr at once, came out above the table."""
    from mlra.agent.record.annotations import Annotation, append_annotation

    runs = _runs(tmp_path)
    append_annotation(runs / SOURCE, Annotation(step=1, seq=1, tags=["x"]))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    both = subprocess.run(
        [sys.executable, "-m", "mlra", "runs", "--runs-dir", str(runs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert both[0].startswith("id ") and both[1].startswith("2026") and both[2].startswith("2026")
    assert both[3].startswith("notes: annotations of the run's steps"), both
    alone = subprocess.run(
        [sys.executable, "-m", "mlra", "runs", "--runs-dir", str(runs)],
        capture_output=True,
        env=env,
        text=True,
        check=True,
    )
    assert len(alone.stdout.splitlines()) == 3  # a file gets the table, one line a run
    assert alone.stderr.startswith("notes: annotations of the run's steps")
