"""`mlra eval` of a run graded, then resumed and not graded since: the resume moved its
grade to `earlier_grade` (of the ending it went on past), and the re-grade's line said
"the run had no grading" though one exists. The run is a real baseline run; its resume
is appended by the real EventLog, as `mlra resume` would write it before being stopped."""

from __future__ import annotations

import json
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog, read_events
from tests.conftest import BaselineRun, mlra_cli


def _resumed_then_stopped(run_dir: Path) -> None:
    log = run_dir / EVENTS_FILE
    resumed = EventLog(log, start_seq=read_events(log)[-1].seq)
    resumed.append(ev.RunResumed(model="baseline"))
    resumed.append(ev.StepStarted(agent="worker", step=2, turn=2, prompt="go on"))
    resumed.append(ev.RunFinished(status="stopped", reason="stopped"))
    resumed.close()


def test_a_regrade_after_a_resume_names_the_earlier_grade(
    answer_baseline_run: BaselineRun, tmp_path: Path
) -> None:
    run_dir = answer_baseline_run.run_dir
    _resumed_then_stopped(run_dir)
    again = mlra_cli(["eval", str(run_dir)], cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "exact_match = 1" in again.stdout
    assert "the run had no grading" not in again.stdout
    assert (
        "re-grade recorded beside the run's own result (not graded since its resume; "
        "graded before it, as it ended finished (submitted): exact_match = 1"
    ) in again.stdout
    # The re-grade is recorded as one, and neither it nor the earlier grade is the
    # run's score: its ending now is the stop after the resume.
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "stopped" and result["score"] is None
    assert result["earlier_grade"]["score"] == 1.0
    (regrade,) = result["regrades"]
    assert regrade["graded"] == "submission/answer.txt" and regrade["score"] == 1.0
