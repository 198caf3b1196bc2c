"""The status line names the call that runs: an edited call as edited, the worker while
a pause holds it between its steps, and a call with no arguments with no colon after
its name. Live runs are driven with Textual's Pilot against the scripted model server
(the real OpenAI SDK over loopback)."""

from __future__ import annotations

import json
from pathlib import Path

from textual.widgets import TextArea

from mlra import events as ev
from mlra.agent.record.state import RunState, fold
from mlra.console.panes.status import activity
from mlra.console.screens.screens import EditArgsScreen
from tests.console.test_console_controls import ANSWER, REPORT, is_, live, worker
from tests.console.test_console_status import status_line
from tests.scripts import call, turn


async def test_the_status_line_shows_an_edited_call_as_it_runs(
    tmp_path: Path, answer_task: Path
) -> None:
    edited = "until [ -f go ]; do sleep 0.05; done; echo 41 > answer.txt"
    async with live(
        tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash:answer.txt"]
    ) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        await run.shown(lambda app: app.state.pending_approval is not None)
        assert "echo 42 > answer.txt" in status_line(run.app)  # what the model asked for
        await run.pilot.press("e")
        await run.shown(lambda app: isinstance(app.screen, EditArgsScreen))
        run.app.screen.query_one(TextArea).text = json.dumps({"command": edited})
        await run.pilot.press("ctrl+s")
        # The call runs as edited (it waits for `go`): the line shows what runs.
        await run.shown(lambda app: "until [ -f go ]" in status_line(app))
        line = status_line(run.app)
        assert "bash" in line and "echo 42" not in line, line
        (run.controller.workspace / "go").touch()
        await run.watch.wait(
            lambda e: isinstance(e, ev.ToolResult) and e.call_id == waiting.call_id  # type: ignore[attr-defined]
        )
        await run.finished()
    assert (run.controller.workspace / "answer.txt").read_text().strip() == "41"


async def test_paused_between_worker_steps_the_line_names_the_worker(
    tmp_path: Path, answer_task: Path
) -> None:
    script = worker(turn("", call("bash", command="echo 1 > a.txt")), ANSWER, REPORT)
    async with live(tmp_path, answer_task, script, start_paused=True) as run:
        await run.watch.wait(is_(ev.Control, action="pause", source="start"))
        seen = []
        for _ in range(4):  # the plan, the assignment, the worker's steps 1 and 2
            mark = run.watch.events[-1].seq
            await run.pilot.press("n")
            await run.watch.wait(is_(ev.Control, action="pause", source="step"), after=mark)
            # The status line is redrawn as the phase changes (to paused).
            await run.shown(lambda app: "PAUSED" in status_line(app))
            seen.append(status_line(run.app))
        await run.pilot.press("space")
        assert (await run.finished()).reason == "submitted"
    after_plan, after_assign, after_step_1, after_step_2 = seen
    assert "assign_subtask" not in after_plan
    # The supervisor's assign_subtask is running, but it only waits on its worker.
    for line in (after_assign, after_step_1, after_step_2):
        assert "assign_subtask" not in line, line
    assert "worker before step 1 (subtask 1)" in after_assign
    assert "worker before step 2 (subtask 1)" in after_step_1
    assert "worker before step 3 (subtask 1)" in after_step_2


async def test_paused_between_the_steps_of_a_worker_alone_the_line_names_it(
    tmp_path: Path, answer_task: Path
) -> None:
    submit = turn("", call("submit", path="answer.txt", note="the answer"))
    script = {"worker": [turn("", call("bash", command="echo 1 > a.txt")), ANSWER, submit]}
    async with live(tmp_path, answer_task, script, start_paused=True, agent="worker") as run:
        await run.watch.wait(is_(ev.Control, action="pause", source="start"))
        await run.shown(lambda app: "PAUSED" in status_line(app))
        # Before, nothing: only a supervisor's running assign_subtask said whose step came.
        await run.shown(lambda app: "worker before step 1 (subtask 1)" in status_line(app))
        mark = run.watch.events[-1].seq
        await run.pilot.press("n")
        await run.watch.wait(is_(ev.Control, action="pause", source="step"), after=mark)
        await run.shown(lambda app: "worker before step 2 (subtask 1)" in status_line(app))
        await run.pilot.press("space")
        assert (await run.finished()).reason == "submitted"


def _state_with(*events: ev.Event) -> RunState:
    sandbox = ev.SandboxInfo(
        kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/w"
    )
    started = ev.RunStarted(
        run_id="r",
        task="t",
        task_title="t",
        model="m",
        limits=ev.Limits(time_limit_s=60),
        sandbox=sandbox,
    )
    for i, event in enumerate((started, *events), start=1):
        event.seq, event.t = i, float(i)
    return fold([started, *events])


def test_a_call_with_no_arguments_has_no_colon_after_its_name() -> None:
    validate = ev.ToolCall(call_id="c1", agent="worker", tool="validate", arguments={})
    running = [t.plain for t in activity(_state_with(validate), elapsed_s=5.0)]
    assert running and all(not t.rstrip().endswith(":") for t in running), running
    assert running[0] == "validate 3s"
    asked = ev.ApprovalRequested(call_id="c1", tool="validate", arguments={}, reason="validate")
    waiting = [t.plain for t in activity(_state_with(validate, asked), elapsed_s=5.0)]
    assert waiting[0] == "validate (validate)", waiting
    assert all(":" not in t for t in waiting), waiting
