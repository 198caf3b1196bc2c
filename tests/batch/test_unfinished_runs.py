"""A run killed midway (its log ends without `run_finished`, no writer) and a run still
going (its writer holds the log), as the report, the shared pages and an MLflow export
tell them: as `mlra runs` and `mlra compare` do, `interrupted` and `running`. The fold
called both "error" (a reason no log gave), so a shared run read "interrupted (error)",
the report and the batch page "unfinished (unfinished)" for a run still going, and
MLflow a FAILED run tagged `error`. Logs written by the real EventLog, as a run's are."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog, read_events
from mlra.batch.report import write_report
from mlra.console.cli.cli import main
from tests.batch.compare_runs import compared_run
from tests.batch.test_share_page import _parse

KILLED = "its log ends without run_finished: mlra was killed or crashed"


@pytest.fixture
def batch(tmp_path: Path) -> Iterator[Path]:
    """A batch folder of one finished run, one killed and one still being written."""
    folder = tmp_path / "b1"
    runs = folder / "runs"
    compared_run(runs, "done", score=0.5)
    compared_run(runs, "killed", finished=False)
    _resumed_then_killed(compared_run(runs, "resumed", score=0.25))
    going = compared_run(runs, "going", finished=False)
    log = going / EVENTS_FILE
    writer = EventLog(log, start_seq=read_events(log)[-1].seq)  # its mlra, still writing
    try:
        yield folder
    finally:
        writer.close()


def _resumed_then_killed(run_dir: Path) -> None:
    """A run that finished (its result.json written), then `mlra resume`d and killed in
    its first step: its log goes on past what result.json was derived from."""
    log = run_dir / EVENTS_FILE
    resumed = EventLog(log, start_seq=read_events(log)[-1].seq)
    resumed.append(ev.RunResumed(model="m1"))
    resumed.append(ev.StepStarted(agent="worker", step=2, turn=2, prompt="go on"))
    resumed.close()


def _text(page: Path) -> str:
    return " ".join(" ".join(_parse(page.read_text(encoding="utf-8")).text).split())


def test_the_report_says_interrupted_and_running(batch: Path) -> None:
    write_report(batch, plots=False)
    report = (batch / "report.md").read_text(encoding="utf-8")
    assert f"- killed (attempt 1): interrupted: {KILLED}" in report
    assert "- going (attempt 1): running: still running" in report
    assert f"- resumed (attempt 1): interrupted: {KILLED}" in report
    assert "interrupted ×2, running ×1" in report
    assert "unfinished" not in report and ": error" not in report


def test_the_shared_pages_say_interrupted_and_running(batch: Path, tmp_path: Path) -> None:
    assert main(["share", str(batch / "runs" / "killed"), "-o", str(tmp_path / "k.html")]) == 0
    killed = _text(tmp_path / "k.html")
    assert "status interrupted score" in killed and "no score (interrupted)" in killed
    assert "(error)" not in killed
    assert main(["share", str(batch), "-o", str(tmp_path / "b.html")]) == 0
    page = _text(tmp_path / "b.html")
    assert "killed m1 1 1 interrupted - no score" in page
    assert "going m1 1 1 running - no score" in page
    assert "resumed m1 1 1 interrupted - no score" in page  # not its earlier grading's
    assert "unfinished" not in page and "(interrupted)" not in page


def test_mlflow_has_a_killed_run_killed_and_a_running_one_running(
    batch: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlflow.tracking import MlflowClient

    dest = tmp_path / "mlruns"
    assert main(["export", str(batch), "--to", "mlflow", "--dest", str(dest)]) == 0
    client = MlflowClient(tracking_uri=dest.resolve().as_uri())
    experiment = client.get_experiment_by_name("mlra/answer")
    assert experiment is not None
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert runs["done"].info.status == "FINISHED"
    assert runs["killed"].info.status == "KILLED"
    assert runs["killed"].data.tags["mlra.status"] == "interrupted"
    assert runs["killed"].data.tags["mlra.ending"].startswith(KILLED)  # why, in words
    assert runs["resumed"].info.status == "KILLED"  # not result.json's "finished"
    assert runs["going"].info.status == "RUNNING" and runs["going"].info.end_time is None
    assert runs["going"].data.tags["mlra.status"] == "running"


def test_a_grade_from_before_a_resume_is_not_the_runs_score(
    batch: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The resumed run was graded 0.25 as it first ended, then resumed and killed: that
    grade is of an ending it went on past, so every view shows no score (result.json
    and `mlra runs --json` keep it as the earlier grade)."""
    runs = batch / "runs"
    capsys.readouterr()
    assert main(["runs", "--runs-dir", str(runs), "--json"]) == 0
    rows = {r["id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["resumed"]["status"] == "interrupted" and rows["resumed"]["score"] is None
    assert rows["resumed"]["earlier_score"] == 0.25
    assert main(["compare", str(runs / "done"), str(runs / "resumed"), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    score_row = next(r for r in table["rows"] if r["name"].startswith("exact_match"))
    assert score_row["cells"] == ["0.5*", "-"]
    write_report(batch, plots=False)
    report = (batch / "report.md").read_text(encoding="utf-8")
    assert "| answer | m1 | 4 | 1 | 0.5000 |" in report  # one scored run, not two
    from mlflow.tracking import MlflowClient

    dest = tmp_path / "mlruns"
    assert main(["export", str(batch), "--to", "mlflow", "--dest", str(dest)]) == 0
    client = MlflowClient(tracking_uri=dest.resolve().as_uri())
    experiment = client.get_experiment_by_name("mlra/answer")
    assert experiment is not None
    runs_by = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert "score" not in runs_by["resumed"].data.metrics
    assert runs_by["done"].data.metrics["score"] == 0.5


def test_wandb_has_a_killed_run_unfinished_and_a_finished_one_finished(
    batch: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Read with W&B's own records: a finished run exits 0 (W&B's Finished); a killed
    run's file ends without an exit, as a W&B run whose process was killed does (Crashed
    once synced), and a run still going's too (Running): every run was exported
    finished, exit code 0, and only its `status:` tag said otherwise."""
    from tests.console.test_export import _wandb_records

    dest = tmp_path / "wb"
    assert main(["export", str(batch), "--to", "wandb", "--dest", str(dest)]) == 0
    exits: dict[str, list[int]] = {}
    for log in (dest / "wandb").glob("offline-run-*/run-*.wandb"):
        records = _wandb_records(log)
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        assert any(r.WhichOneof("record_type") == "history" for r in records)  # kept whole
        exits[run.display_name] = [r.exit.exit_code for r in records if r.HasField("exit")]
    assert exits == {"done": [0], "killed": [], "resumed": [], "going": []}


def test_a_group_none_of_whose_runs_was_scored_says_so_not_0_percent(tmp_path: Path) -> None:
    """Two killed runs of a model: no run graded, so no success rate; the report, its
    CSV and JSON and the shared batch page said 0%, beside a scored group's rate."""
    folder = tmp_path / "b2"
    compared_run(folder / "runs", "done", score=0.5)
    compared_run(folder / "runs", "k1", model="m2", finished=False)
    compared_run(folder / "runs", "k2", model="m2", finished=False)
    write_report(folder, plots=False)
    report = (folder / "report.md").read_text(encoding="utf-8")
    (m2,) = [line for line in report.splitlines() if line.startswith("| answer | m2 |")]
    assert "| none scored |" in m2 and "0%" not in m2
    groups = {g["model"]: g for g in json.loads((folder / "report.json").read_text())["groups"]}
    assert groups["m2"]["success_rate"] is None and groups["m1"]["success_rate"] == 1.0
    assert main(["share", str(folder), "-o", str(tmp_path / "b.html")]) == 0
    page = _text(tmp_path / "b.html")
    assert "answer m2 2 0 - none scored" in page
