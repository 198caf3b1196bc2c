"""Pausing, stepping and stopping around a breakpoint: the footer's Space says what it will
do, `n` lets the held call through as the one action, then pauses, and a stop of a paused
run starts nothing more."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import Footer, Static, TextArea
from textual.widgets._footer import FooterKey

from mlra import events as ev
from mlra.agent.control.control_ops import act, run_status
from mlra.console.apps.app import MlraApp
from mlra.console.cli.ctl_cli import status_lines
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.screens.screens import ConfirmScreen, EditArgsScreen
from mlra.control_socket import CtlRequest
from tests.console.test_console_controls import ANSWER, REPORT, is_, live, worker
from tests.console.test_console_status import status_line
from tests.scripts import call, turn

FIRST = turn("", call("bash", command="echo 1 > first.txt"))


def space_says(app: MlraApp) -> list[str]:
    """What the footer offers on Space (Pause or Resume)."""
    return [
        str(key.description)
        for key in app.screen.query_one(Footer).query(FooterKey)
        if key.key == "space"
    ]


async def test_pausing_at_a_breakpoint_turns_the_footers_pause_into_resume(
    tmp_path: Path, answer_task: Path
) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        await run.watch.wait(is_(ev.ApprovalRequested))
        await run.shown(lambda app: app.state.phase == "awaiting_approval")
        await run.shown(lambda app: space_says(app) == ["Pause"])
        await run.pilot.press("space")
        await run.watch.wait(is_(ev.Control, action="pause"))
        # Before, the footer still offered Pause on a paused run (the phase stayed
        # "awaiting_approval", so the footer was never redrawn).
        await run.shown(lambda app: space_says(app) == ["Resume"])
        await run.pilot.press("space")
        await run.watch.wait(is_(ev.Control, action="resume"))
        await run.shown(lambda app: space_says(app) == ["Pause"])
        await run.pilot.press("a")
        assert (await run.finished()).reason == "submitted"


async def test_n_after_approving_a_held_call_runs_that_call_then_pauses(
    tmp_path: Path, answer_task: Path
) -> None:
    script = worker(FIRST, ANSWER, REPORT)
    async with live(tmp_path, answer_task, script, breakpoints=["bash:first"]) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        assert isinstance(waiting, ev.ApprovalRequested)
        await run.shown(lambda app: app.state.pending_approval is not None)
        await run.pilot.press("space")  # pause, then approve: the call is held by the pause
        await run.watch.wait(is_(ev.Control, action="pause"))
        await run.pilot.press("a")
        await run.watch.wait(is_(ev.Control, action="approve"))
        assert run.watch.count(is_(ev.ToolResult, call_id=waiting.call_id)) == 0
        mark = run.watch.events[-1].seq
        await run.pilot.press("n")
        await run.watch.wait(is_(ev.Control, action="pause", source="step"), after=mark)
        # The step was the held call, and nothing after it: before, the run went on
        # to ask the model for its next turn and ran that turn's call too.
        assert run.watch.count(is_(ev.ToolResult, call_id=waiting.call_id)) == 1
        assert len(run.server.requests_for("worker")) == 1
        assert not (run.controller.workspace / "answer.txt").exists()
        await run.pilot.press("space")
        assert (await run.finished()).reason == "submitted"


TWO = turn(
    "", call("bash", command="echo 1 > first.txt"), call("bash", command="echo 2 > second.txt")
)


async def test_n_on_a_held_call_of_a_two_call_turn_pauses_before_the_second(
    tmp_path: Path, answer_task: Path
) -> None:
    """One action is one call, whatever the turn holds: `n` on the held first call runs
    it and pauses before the same turn's second call; the next `n` runs that one alone.
    Before, the second call ran under the same `n`."""
    script = worker(TWO, ANSWER, REPORT)
    async with live(tmp_path, answer_task, script, breakpoints=["bash:first"]) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        assert isinstance(waiting, ev.ApprovalRequested)
        await run.shown(lambda app: app.state.pending_approval is not None)
        await run.pilot.press("space")
        await run.watch.wait(is_(ev.Control, action="pause"))
        await run.pilot.press("a")
        await run.watch.wait(is_(ev.Control, action="approve"))
        mark = run.watch.events[-1].seq
        await run.pilot.press("n")
        paused = await run.watch.wait(is_(ev.Control, action="pause", source="step"), after=mark)
        first, second = [e for e in run.watch.events if isinstance(e, ev.ToolCall)][-2:]
        assert run.watch.count(is_(ev.ToolResult, call_id=first.call_id)) == 1
        assert run.watch.count(is_(ev.ToolResult, call_id=second.call_id)) == 0
        assert not (run.controller.workspace / "second.txt").exists()
        await run.shown(lambda app: app.state.phase == "paused")
        # The status line says what the next `n` runs: the held call, not begun.
        await run.shown(lambda app: "bash before it runs: echo 2 > second.txt" in status_line(app))
        await run.shown(lambda app: "not begun yet" in _entry(app, second.call_id))
        assert "running…" not in _entry(run.app, second.call_id)
        # `mlra ctl RUN status` says it too.
        said = status_lines(run_status(run.controller, None, 0))
        assert any(
            line.startswith(f"next: {second.call_id} (worker) bash") and "held by the pause" in line
            for line in said
        ), said
        await run.pilot.press("n")
        await run.watch.wait(is_(ev.Control, action="pause", source="step"), after=paused.seq)
        assert run.watch.count(is_(ev.ToolResult, call_id=second.call_id)) == 1
        assert (run.controller.workspace / "second.txt").exists()
        assert len(run.server.requests_for("worker")) == 1  # no next turn asked for
        await run.pilot.press("space")
        assert (await run.finished()).reason == "submitted"


def _entry(app: MlraApp, call_id: str) -> str:
    """A call's transcript entry as shown."""
    entry = app.query_one(TranscriptPane).tool_entry(call_id)
    return "" if entry is None else entry.render_entry().plain


async def test_a_call_edited_from_ctl_says_who_edited_it(tmp_path: Path, answer_task: Path) -> None:
    """The transcript said "edited by you" of an edit `mlra ctl RUN edit` made."""
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        assert isinstance(waiting, ev.ApprovalRequested)
        with run.controller.acting_as("ctl"):  # as the control server runs `ctl edit`
            assert run.controller.edit(waiting.call_id, {"command": "echo 42 > answer.txt"})
        await run.watch.wait(is_(ev.ToolResult, call_id=waiting.call_id))
        await run.shown(lambda app: "edited by ctl → " in _entry(app, waiting.call_id))
        assert "edited by you" not in _entry(run.app, waiting.call_id)
        assert (await run.finished()).reason == "submitted"


async def test_an_approval_shows_under_the_call_above_what_it_printed(
    tmp_path: Path, answer_task: Path
) -> None:
    """The transcript read the call, its output, then "you: approved the call" below it
    all: the approval is said under the call's line, before what the call printed."""
    printing = turn("", call("bash", command="echo printed-line; echo 42 > answer.txt"))
    async with live(tmp_path, answer_task, worker(printing, REPORT), breakpoints=["bash"]) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        assert isinstance(waiting, ev.ApprovalRequested)
        await run.shown(lambda app: app.state.pending_approval is not None)
        await run.pilot.press("a")
        await run.watch.wait(is_(ev.ToolResult, call_id=waiting.call_id))
        await run.shown(lambda app: "│ printed-line" in _entry(app, waiting.call_id))
        lines = _entry(run.app, waiting.call_id).splitlines()
        approved = next(i for i, line in enumerate(lines) if "approved by you" in line)
        printed = next(i for i, line in enumerate(lines) if "│ printed-line" in line)
        assert approved < printed, lines
        pane = run.app.query_one(TranscriptPane)
        assert not [e for e in pane._entries if "approved the call" in e.render_entry().plain]
        assert (await run.finished()).reason == "submitted"


async def test_n_from_a_pause_runs_a_turn_and_its_first_call_only(
    tmp_path: Path, answer_task: Path
) -> None:
    """Stepping from the start, each `n` one action: the step that asks the model for the
    two-call turn runs its first call and pauses before the second."""
    script = worker(TWO, ANSWER, REPORT)
    async with live(tmp_path, answer_task, script, start_paused=True) as run:
        mark = (await run.watch.wait(is_(ev.Control, action="pause", source="start"))).seq
        for _ in range(12):
            await run.shown(lambda app: app.state.phase == "paused")
            await run.pilot.press("n")
            step = await run.watch.wait(is_(ev.Control, action="step"), after=mark)
            mark = (
                await run.watch.wait(is_(ev.Control, action="pause", source="step"), after=step.seq)
            ).seq
            if (run.controller.workspace / "first.txt").exists():
                break
        assert not (run.controller.workspace / "second.txt").exists()
        first, second = [e for e in run.watch.events if isinstance(e, ev.ToolCall)][-2:]
        assert run.watch.count(is_(ev.ToolResult, call_id=first.call_id)) == 1
        assert run.watch.count(is_(ev.ToolResult, call_id=second.call_id)) == 0
        await run.pilot.press("space")
        assert (await run.finished()).reason == "submitted"


async def test_n_at_an_approval_runs_that_call_then_pauses(
    tmp_path: Path, answer_task: Path
) -> None:
    """`n` with a call waiting for approval approves it as the one action and pauses
    after it, as a debugger's step runs the line it stands on. Before, `n` paused, then
    stepped, then paused again ("you: paused", "you: stepped one action", ...), the
    header flipping, and the call never ran."""
    script = worker(FIRST, ANSWER, REPORT)
    async with live(tmp_path, answer_task, script, breakpoints=["bash:first"]) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        assert isinstance(waiting, ev.ApprovalRequested)
        await run.shown(lambda app: app.state.pending_approval is not None)
        mark = run.watch.events[-1].seq
        await run.pilot.press("n")
        await run.watch.wait(is_(ev.Control, action="approve", call_id=waiting.call_id))
        await run.watch.wait(is_(ev.Control, action="pause", source="step"), after=mark)
        assert run.watch.count(is_(ev.ToolResult, call_id=waiting.call_id)) == 1
        assert (run.controller.workspace / "first.txt").exists()
        assert len(run.server.requests_for("worker")) == 1  # no next turn asked for
        await run.shown(lambda app: app.state.phase == "paused")
        await run.pilot.press("space")
        assert (await run.finished()).reason == "submitted"


async def test_ctl_step_at_an_approval_while_paused_runs_that_call_then_pauses(
    tmp_path: Path, answer_task: Path
) -> None:
    """`mlra ctl RUN step` on a paused run whose call waits: the same step as the
    console's `n`, and its answer says it approved the call."""
    script = worker(FIRST, ANSWER, REPORT)
    async with live(tmp_path, answer_task, script, breakpoints=["bash:first"]) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        assert isinstance(waiting, ev.ApprovalRequested)
        await run.shown(lambda app: app.state.pending_approval is not None)
        await run.pilot.press("space")
        await run.watch.wait(is_(ev.Control, action="pause"))
        mark = run.watch.events[-1].seq
        said = act(run.controller, CtlRequest(op="step"))
        assert said == f"approved {waiting.call_id}: it runs as the one action, then paused"
        await run.watch.wait(is_(ev.Control, action="pause", source="step"), after=mark)
        assert run.watch.count(is_(ev.ToolResult, call_id=waiting.call_id)) == 1
        assert len(run.server.requests_for("worker")) == 1
        await run.pilot.press("space")
        assert (await run.finished()).reason == "submitted"


async def test_stopping_a_paused_run_starts_no_step_and_asks_the_model_nothing(
    tmp_path: Path, answer_task: Path
) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), start_paused=True) as run:
        await run.watch.wait(is_(ev.Control, action="pause", source="start"))
        await run.shown(lambda app: app.state.phase == "paused")
        await run.pilot.press("s")
        await run.shown(lambda app: isinstance(app.screen, ConfirmScreen))
        await run.pilot.press("y")
        finished = await run.finished()
    assert finished.reason == "stopped"
    # Before, the stop opened the paused run's gate: the supervisor began a step whose
    # model call the stop then cut off, its estimated tokens counted in the totals.
    assert run.watch.count(is_(ev.StepStarted)) == 0
    assert run.watch.count(is_(ev.ModelError)) == 0
    assert run.controller.state.tokens == 0
    assert run.server.requests == []


async def test_stopping_a_paused_run_with_an_approved_call_held_does_not_run_it(
    tmp_path: Path, answer_task: Path
) -> None:
    script = worker(FIRST, ANSWER, REPORT)
    async with live(tmp_path, answer_task, script, breakpoints=["bash:first"]) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        assert isinstance(waiting, ev.ApprovalRequested)
        await run.shown(lambda app: app.state.pending_approval is not None)
        await run.pilot.press("space")
        await run.watch.wait(is_(ev.Control, action="pause"))
        await run.pilot.press("a")
        await run.watch.wait(is_(ev.Control, action="approve"))
        await run.pilot.press("s")
        await run.shown(lambda app: isinstance(app.screen, ConfirmScreen))
        await run.pilot.press("y")
        await run.finished()
        result = await run.watch.wait(is_(ev.ToolResult, call_id=waiting.call_id))
    # The log closes the call, saying it never began (before, the stop let it start).
    assert isinstance(result, ev.ToolResult) and not result.ok
    assert "not run" in result.output
    assert not (run.controller.workspace / "first.txt").exists()
    assert run.watch.count(is_(ev.ToolOutput)) == 0


async def test_stopping_a_run_whose_call_waits_for_approval_closes_the_call(
    tmp_path: Path, answer_task: Path
) -> None:
    """A stop (or quit) while a call still waits at its breakpoint: the log closes the
    call, as it closes one a pause held. Before, no result was written: a replay of the
    ended run (and its transcript) showed the call waiting for approval for ever."""
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        assert isinstance(waiting, ev.ApprovalRequested)
        await run.shown(lambda app: app.state.pending_approval is not None)
        await run.pilot.press("s")
        await run.shown(lambda app: isinstance(app.screen, ConfirmScreen))
        await run.pilot.press("y")
        await run.finished()
        result = await run.watch.wait(is_(ev.ToolResult, call_id=waiting.call_id))
        await run.shown(lambda app: "waiting for your approval" not in _entry(app, waiting.call_id))
    assert isinstance(result, ev.ToolResult) and not result.ok
    assert "not run" in result.output and "approv" in result.output
    assert not (run.controller.workspace / "answer.txt").exists()
    assert run.controller.state.pending_approval is None


async def test_an_edit_the_tool_would_refuse_is_said_in_the_dialog_and_the_call_waits(
    tmp_path: Path, answer_task: Path
) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        assert isinstance(waiting, ev.ApprovalRequested)
        await run.shown(lambda app: app.state.pending_approval is not None)
        await run.pilot.press("e")
        await run.shown(lambda app: isinstance(app.screen, EditArgsScreen))
        area = run.app.screen.query_one(TextArea)
        area.text = json.dumps({"command": "echo 41 > answer.txt", "timeout": "soon"})
        await run.pilot.press("ctrl+s")
        await run.pilot.pause()
        # Before, the edit went through and the worker's step was spent on the tool's
        # error ("invalid arguments for bash: timeout: ...").
        assert isinstance(run.app.screen, EditArgsScreen)
        said = str(run.app.screen.query_one("#edit-error", Static).render())
        assert "invalid arguments for bash: timeout" in said
        assert run.watch.count(is_(ev.Control, action="edit")) == 0
        # `mlra ctl RUN edit` and an attached console reach the same check in the run.
        with pytest.raises(ValueError, match="invalid arguments for bash"):
            run.controller.edit(waiting.call_id, {"command": "true", "timeout": "soon"})
        area.text = json.dumps({"command": "echo 41 > answer.txt"})
        await run.pilot.press("ctrl+s")
        result = await run.watch.wait(is_(ev.ToolResult, call_id=waiting.call_id))
        await run.finished()
    assert isinstance(result, ev.ToolResult) and result.ok
    assert (run.controller.workspace / "answer.txt").read_text().strip() == "41"


async def test_space_or_n_after_a_stop_does_nothing_on_the_way_to_grading(
    tmp_path: Path, answer_task: Path
) -> None:
    """Between a stop and the run's end (its attempts and jobs stopped, then grading),
    Space or n still paused the run: its clock stopped and its commands were suspended
    on the way to grading."""
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), start_paused=True) as run:
        await run.watch.wait(is_(ev.Control, action="pause", source="start"))
        run.controller.resume()
        run.controller.request_stop()
        run.controller.step()
        run.controller.pause()
        run.controller.resume()
        finished = await run.finished()
    assert finished.reason == "stopped"
    actions = [e.action for e in run.watch.events if isinstance(e, ev.Control)]
    assert actions[actions.index("stop") :] == ["stop"], actions


async def test_a_step_while_a_stepped_call_waits_runs_only_that_call(
    tmp_path: Path, answer_task: Path
) -> None:
    """In step mode (stepping from a pause), the stepped turn's call waits at its
    breakpoint; a step given then approves it: the call is the step's one action, and
    no step is left over for the model's next turn."""
    script = worker(FIRST, ANSWER, REPORT)
    async with live(
        tmp_path, answer_task, script, breakpoints=["bash:first"], start_paused=True
    ) as run:
        mark = (await run.watch.wait(is_(ev.Control, action="pause", source="start"))).seq
        for _ in range(12):  # each `n` one action, until the call waits at its breakpoint
            await run.pilot.press("n")
            step = await run.watch.wait(is_(ev.Control, action="step"), after=mark)
            mark = (await run.watch.wait(_stepped_or_waiting, after=step.seq)).seq
            if run.watch.count(is_(ev.ApprovalRequested)):
                break
            await run.shown(lambda app: app.state.phase == "paused")
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        assert isinstance(waiting, ev.ApprovalRequested)
        mark = run.watch.events[-1].seq
        act(run.controller, CtlRequest(op="step"))  # approves the waiting call
        await run.watch.wait(is_(ev.Control, action="approve"), after=mark)
        await run.watch.wait(is_(ev.Control, action="pause", source="step"), after=mark)
        assert run.watch.count(is_(ev.ToolResult, call_id=waiting.call_id)) == 1
        assert not (run.controller.workspace / "answer.txt").exists()
        assert len(run.server.requests_for("worker")) == 1
        await run.pilot.press("space")
        assert (await run.finished()).reason == "submitted"


def _stepped_or_waiting(event: ev.Event) -> bool:
    if isinstance(event, ev.ApprovalRequested):
        return True
    return isinstance(event, ev.Control) and event.action == "pause" and event.source == "step"
