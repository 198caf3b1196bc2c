"""`mlra runs` shows each run's best validation score and its number of experiments
(issue 16), in the table and in --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlra.console.cli.cli import main
from tests.batch.test_experiments_report import experiment_run


def test_runs_lists_the_best_validation_and_the_experiments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    experiment_run(runs, "a-validated", [0.4, None, 0.7, 0.6])
    experiment_run(runs, "b-never", [])
    assert main(["runs", "--runs-dir", str(runs)]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    names = header.split()
    assert names[5:9] == ["score", "normalized", "best", "val."] and names[9] == "exp."
    cells = {line.split()[0]: line.split() for line in lines}
    assert cells["a-validated"][5:9] == ["0.5", "+0.500", "0.7", "4"]
    assert cells["b-never"][5:9] == ["0.5", "+0.500", "-", "-"]

    assert main(["runs", "--runs-dir", str(runs), "--json"]) == 0
    rows = {r["id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert (rows["a-validated"]["best_validation"], rows["a-validated"]["experiments"]) == (0.7, 4)
    assert (rows["b-never"]["best_validation"], rows["b-never"]["experiments"]) == (None, 0)
