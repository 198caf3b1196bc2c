"""A tracker export added as docs/contributing.md says: its writer and one line of
batch/export/trackers.py's table, and `mlra export --to` takes it, its help names it,
and the export writes through it; a tracker whose package is missing, and a name the
table does not have, are each one line and exit status 2, as for the built-in three."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlra.batch.export.source import Experiment
from mlra.batch.export.trackers import TRACKERS, Tracker
from mlra.console.cli.cli import main
from tests.batch.metrics_runs import metrics_run


class JsonLines:
    """The recipe's example writer: one JSON line a run, its name and final numbers."""

    PACKAGE = "json"
    DEFAULT_DEST = "runs.jsonl"

    def write(self, experiment: Experiment, dest: str) -> str:
        with Path(dest).open("a", encoding="utf-8") as out:
            for run in experiment.runs:
                out.write(json.dumps({"run": run.name, "final": run.final}) + "\n")
        return f"{len(experiment.runs)} run(s) of {experiment.name} appended to {dest}"


JSON_LINES = JsonLines()


class Unreachable(JsonLines):
    PACKAGE = "mlra_no_such_tracker_client"


UNREACHABLE = Unreachable()


@pytest.fixture
def with_jsonl(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one table line the recipe adds (and one whose client is not installed)."""
    monkeypatch.setitem(
        TRACKERS,
        "jsonl",
        Tracker(
            f"{__name__}:JSON_LINES", "JSON lines", "file (JSON lines)", "runs.jsonl by default"
        ),
    )
    monkeypatch.setitem(
        TRACKERS, "nowhere", Tracker(f"{__name__}:UNREACHABLE", "Nowhere", "void", "nothing")
    )


@pytest.mark.usefixtures("with_jsonl")
def test_an_export_added_by_one_line_is_offered_and_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = metrics_run(tmp_path / "runs", "r1", score=0.5)
    dest = tmp_path / "out.jsonl"
    assert main(["export", str(run), "--to", "jsonl", "--dest", str(dest)]) == 0
    assert "1 run(s) of answer appended to" in capsys.readouterr().out
    (line,) = dest.read_text(encoding="utf-8").splitlines()
    assert json.loads(line)["run"] == "r1"

    with pytest.raises(SystemExit):
        main(["export", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "{mlflow,wandb,tensorboard,jsonl,nowhere}" in help_text
    assert "folder (TensorBoard), file (JSON lines) or void per task" in help_text
    assert "TensorBoard event files (default ./tensorboard), runs.jsonl by default" in help_text


@pytest.mark.usefixtures("with_jsonl")
def test_an_export_whose_client_is_missing_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = metrics_run(tmp_path / "runs", "r1")
    assert main(["export", str(run), "--to", "nowhere"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "--to nowhere needs the mlra_no_such_tracker_client package: "
        "pip install mlra_no_such_tracker_client"
    )
    assert "\n" not in err


def test_an_export_the_table_lacks_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = metrics_run(tmp_path / "runs", "r1")
    with pytest.raises(SystemExit) as exit_:
        main(["export", str(run), "--to", "neptune"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert (
        "argument --to: invalid choice: 'neptune' (choose from 'mlflow', 'wandb', 'tensorboard')"
        in err
    )
    assert "\n" not in err
