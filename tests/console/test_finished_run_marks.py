"""A finished run's marks: its plan's submit step done and the steps after it not
started, and UNISOLATED said once, in the score line and in the status bar."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text

from mlra import events as ev
from mlra.console.apps.app import MlraApp
from mlra.console.panes.plan import step_mark
from mlra.console.panes.status import StatusBar, score_texts
from mlra.console.text.event_lines import score_line
from tests.console.console_fixtures import recorded_run


def test_a_submitted_runs_submit_step_is_done_and_unisolated_is_said_once() -> None:
    submitted = ev.RunFinished(status="finished", reason="submitted", message="")
    assert step_mark(ev.PlanStep(id="2", title="Submit"), submitted)[2] == "done: the run submitted"
    assert step_mark(ev.PlanStep(id="3", title="Write a report"), submitted)[2] == (
        "not started: the run submitted"
    )
    score = ev.EvaluationFinished(
        ok=True, metric="acc", score=0.9, baseline=0.5, agent_isolation="none"
    )
    assert "UNISOLATED" in score_line(score)
    assert all("UNISOLATED" not in t.plain for t in score_texts(score, unisolated=False))


async def test_a_finished_unisolated_run_says_unisolated_once(tmp_path: Path) -> None:
    events = []
    for event in recorded_run("finished"):
        if isinstance(event, ev.RunStarted):
            sandbox = event.sandbox.model_copy(update={"isolation": "none"})
            event = event.model_copy(update={"sandbox": sandbox})
        elif isinstance(event, ev.EvaluationFinished):
            event = event.model_copy(update={"agent_isolation": "none"})
        events.append(event)
    app = MlraApp(events=events)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        content = app.query_one(StatusBar).content
        line = content.plain if isinstance(content, Text) else str(content)
        assert "minimal_pair_accuracy" in line and line.count("UNISOLATED") == 1, line
