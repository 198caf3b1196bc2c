"""A batch that did not run to its end (stopped before some of its runs began, a run
stopped midway, a run ungraded) is reported for what it is: its runs that never started
or have no outcome are not failures in its success rates, and report.md says it is
partial, with how many of the batch's runs ran. Before, a batch stopped after the first of
its three seeds reported "1 runs" and "success 100%", as if that were the batch (the runs
it never began were left out), and where they were rows (refused, or stopped midway)
they counted as failed: one success in three judged runs read "17%", a rate over six."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog
from mlra.agent.record.run_result import write_result
from mlra.agent.record.state import RunState
from mlra.batch.report import write_report
from mlra.batch.report_tables import group_line
from mlra.batch.state import (
    NODE_LOST,
    RUNS,
    Placement,
    RunCard,
    RunStatus,
    lost_attempt,
    write_card,
)
from mlra.console.cli.cli import main
from tests.batch.test_batch_endings import MODEL, _run


def _table_row(md: str, model: str) -> list[str]:
    (line,) = [row for row in md.splitlines() if row.startswith(f"| answer | {model} |")]
    return [cell.strip() for cell in line.strip("|").split("|")]


SUCCESS = 8
"""The success column of report.md's table."""


async def test_a_batch_stopped_before_its_later_seeds_says_so(
    tmp_path: Path, answer_task: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real runner, baseline on the answer task, one run at a time, stopped (as
    Ctrl-C stops it) once its first seed has ended: seeds 2 and 3 never began."""
    from mlra.batch.executors.local import Capacity, LocalExecutor
    from mlra.batch.run_ids import run_names
    from mlra.batch.runner import BatchRunner
    from mlra.batch.spec import BatchSpec, expand

    out = tmp_path / "b"
    spec = BatchSpec(
        tasks=[str(answer_task)], models=["baseline"], seeds=3, parallel=1, out=out,
        isolation="none",
    )  # fmt: skip
    executor = LocalExecutor(Capacity(cpus=8, memory_gb=64, gpus=[]))
    runner = BatchRunner(spec, expand(spec, run_names(out)), executor, out)
    batch = asyncio.ensure_future(runner.run())
    settled: list[RunStatus] = []

    def stop(status: RunStatus) -> None:
        settled.append(status)
        batch.cancel()  # the slot it freed is taken by no other run: they never begin

    runner.on_settled = stop
    with pytest.raises(asyncio.CancelledError):
        await batch
    assert [s.kind for s in settled] == ["finished"], settled
    assert len(list((out / RUNS).iterdir())) == 1

    capsys.readouterr()
    assert main(["report", str(out), "--no-plots"]) == 0
    shown = capsys.readouterr().out  # `mlra report` prints report.md
    assert "Partial report: 1 of 3 runs ran; 2 never started." in shown, shown
    row = _table_row(shown, "baseline")
    assert row[2:4] == ["3", "1"]  # three runs, one scored
    assert row[SUCCESS] == "100% of 1 judged", row  # not 33%: two runs were never judged
    assert ": not started: the batch was stopped before it began" in shown
    report = json.loads((out / "report.json").read_text())
    assert report["partial"] == {
        "runs": 3, "ran": 1, "never_started": 2, "lost": 0, "stopped_midway": 0,
        "running": 0, "queued": 0,
    }  # fmt: skip
    (group,) = report["groups"]
    assert group["success_rate"] == 1.0 and group["judged_runs"] == 1
    never = [r for r in report["runs"] if not r["started"]]
    assert len(never) == 2 and all(r["success"] is None for r in never)


def _ungraded(run_dir: Path) -> None:
    """A run started with `--ungraded` that scored: its score is no grading of the task."""
    log = EventLog(run_dir / EVENTS_FILE)
    state = RunState()
    log.subscribe(state.apply)
    sandbox = ev.SandboxInfo(
        kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/w"
    )
    log.append(
        ev.RunStarted(
            run_id=run_dir.name, task="answer", task_title="A", model="m2",
            limits=ev.Limits(time_limit_s=60), sandbox=sandbox,
            config={"seed": 1, "ungraded": "no grader here"},
        )
    )  # fmt: skip
    log.append(ev.Submission(path="answer.txt", by="agent"))
    log.append(ev.EvaluationFinished(ok=True, metric="exact_match", score=1.0, normalized=1.0))
    log.append(ev.RunFinished(status="finished", reason="submitted", message="done"))
    log.close()
    write_result(state, run_dir)


def test_runs_with_no_outcome_are_not_failures_and_a_stop_is_partial(tmp_path: Path) -> None:
    """Seeds 1-4 of one model: a success, a failure below the bar, a run that ended by
    itself with no submission (a failure: its ending is the agent's), a run stopped
    midway (no outcome), a run refused for resources and one never begun (no outcome).
    The rate is 1 of 3 judged, not 1 of 6; an ungraded run of another model reads "not
    judged", not 0%."""
    runs = tmp_path / RUNS
    _run(runs / "answer__m__s1", seed=1, score=1.0)
    _run(runs / "answer__m__s2", seed=2, score=0.0)
    _run(runs / "answer__m__s3", seed=3, reason="no_submission")
    _run(runs / "answer__m__s4", seed=4, status="stopped", reason="stopped")
    for seed in (1, 2, 3, 4, 5):
        write_card(
            tmp_path, RunCard(run_id=f"answer__m__s{seed}", task="answer", model=MODEL, seed=seed)
        )
    refused = RunCard(run_id="answer__m__s6", task="answer", model=MODEL, seed=6)
    refused.not_started, refused.detail = "resources", "needs 3 GPU(s); this machine has 2"
    write_card(tmp_path, refused)
    _ungraded(runs / "answer__u__s1")
    write_card(tmp_path, RunCard(run_id="answer__u__s1", task="answer", model="m2", seed=1))

    groups = {g.model: g for g in write_report(tmp_path, plots=False)}
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert (
        "Partial report: 5 of 7 runs ran; 2 never started, and 1 stopped before an outcome." in md
    ), md
    row = _table_row(md, MODEL)
    assert row[2:4] == ["6", "2"] and row[SUCCESS] == "33% of 3 judged", row
    assert _table_row(md, "m2")[SUCCESS] == "not judged"
    assert "success 33% of 3 judged" in group_line(groups[MODEL])  # `mlra batch`'s last lines
    assert groups[MODEL].success_rate == pytest.approx(1 / 3)
    assert groups["m2"].success_rate is None and groups["m2"].scored == 1


def test_a_batch_that_ran_to_its_end_reads_as_before(tmp_path: Path) -> None:
    runs = tmp_path / RUNS
    _run(runs / "answer__m__s1", seed=1, score=1.0)
    _run(runs / "answer__m__s2", seed=2, score=0.0)
    (group,) = write_report(tmp_path, plots=False)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "Partial report" not in md and _table_row(md, MODEL)[SUCCESS] == "50%"
    assert json.loads((tmp_path / "report.json").read_text())["partial"] is None
    assert group.judged_runs == 2


def test_a_run_lost_with_its_node_is_not_said_to_have_never_started(tmp_path: Path) -> None:
    """An attempt Ray lost with its node before any of its folder came back may have run
    a while: it has no outcome, and is counted apart from the runs never begun."""
    _run(tmp_path / RUNS / "answer__m__s1", seed=1, score=1.0)
    for seed in (1, 2):
        write_card(
            tmp_path, RunCard(run_id=f"answer__m__s{seed}", task="answer", model=MODEL, seed=seed)
        )
    gone = Placement(node_id="deadbeef" * 2, host="nodeB", outcome=NODE_LOST, detail="gone")
    lost_attempt(tmp_path, "answer__m__s2", gone)
    write_report(tmp_path, plots=False)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "Partial report: 1 of 2 runs ran; 1 lost with its node." in md
    assert _table_row(md, MODEL)[SUCCESS] == "100% of 1 judged"


def test_judged_runs_is_the_last_column_of_report_csv(tmp_path: Path) -> None:
    """A column added later goes last: a script reading report.csv's columns by place
    read `judged_runs` where `worker_alone` had been."""
    _run(tmp_path / RUNS / "answer__m__s1", seed=1, score=1.0)
    write_report(tmp_path, plots=False)
    header = (tmp_path / "report.csv").read_text(encoding="utf-8").splitlines()[0].split(",")
    assert header[-1] == "judged_runs" and header[21:23] == ["judged", "worker_alone"]
