"""`n` while the run runs freely is a debugger's step: the action in hand finishes (the
command is not suspended), then the run pauses at the next step boundary, recorded as a
step's pause is, so a replay and a headless run see it. It paused at once before."""

from __future__ import annotations

import json
from pathlib import Path

from mlra import events as ev
from mlra.agent.control.control_ops import act
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.screens.screens import ConfirmScreen
from mlra.control_socket import CtlRequest
from tests.console.test_console_controls import (
    ANSWER,
    REPORT,
    SLOW_COUNT,
    UNTIL_STOPPED,
    is_,
    live,
    status_line,
    worker,
)
from tests.scripts import call, turn


async def test_n_while_running_pauses_after_the_action_in_hand(
    tmp_path: Path, answer_task: Path
) -> None:
    script = worker(turn("count", call("python", code=SLOW_COUNT)), ANSWER, REPORT)
    async with live(tmp_path, answer_task, script) as run:
        await run.watch.wait(is_(ev.ToolOutput))  # the count runs: an action in hand
        assert not run.controller.controls.paused
        await run.pilot.press("n")
        step = await run.watch.wait(is_(ev.Control, action="step"))
        paused = await run.watch.wait(is_(ev.Control, action="pause"))
        assert paused.source == "step"
        # The count ran to its end, not suspended mid-way, and nothing began after it.
        counted = next(
            e for e in run.watch.events if isinstance(e, ev.ToolResult) and e.tool == "python"
        )
        assert counted.ok and "tick 59" in counted.output
        assert step.seq < counted.seq < paused.seq
        assert not any(
            isinstance(e, ev.StepStarted | ev.ToolCall) and counted.seq < e.seq < paused.seq
            for e in run.watch.events
        )
        await run.shown(lambda app: app.state.phase == "paused")
        assert run.controller.controls.paused
        transcript = run.app.query_one(TranscriptPane)
        await run.shown(lambda app: "you: pause after the action in hand" in _text(transcript))
        # The log has it as the headless run and the replay read it.
        log = run.controller.run_dir / "events.jsonl"
        kinds = [json.loads(line) for line in log.read_text().splitlines()]
        assert {"type": "control", "action": "pause", "source": "step"}.items() <= next(
            k for k in kinds if k.get("type") == "control" and k.get("action") == "pause"
        ).items()
        await run.pilot.press("space")  # resume: the run goes on to its end
        assert (await run.finished()).reason == "submitted"


async def test_a_pending_pause_shows_and_a_second_n_records_nothing_more(
    tmp_path: Path, answer_task: Path
) -> None:
    script = worker(turn("count", call("python", code=UNTIL_STOPPED)), ANSWER, REPORT)
    async with live(tmp_path, answer_task, script) as run:
        await run.watch.wait(is_(ev.ToolOutput))  # a long count: the action in hand
        await run.pilot.press("n")
        await run.watch.wait(is_(ev.Control, action="step"))
        # It said RUNNING, as if nothing were asked: now the pause to come shows.
        await run.shown(lambda app: "RUNNING · pausing after this action" in status_line(app))
        await run.pilot.press("n")  # again: the toast again, no second step recorded
        await run.pilot.pause()
        await run.pilot.press("space")  # pause now
        await run.watch.wait(is_(ev.Control, action="pause"))
        steps = [e for e in run.watch.events if isinstance(e, ev.Control) and e.action == "step"]
        assert len(steps) == 1
        await run.shown(lambda app: app.state.phase == "paused")
        assert "pausing" not in status_line(run.app)
        await run.pilot.press("s")
        await run.shown(lambda app: isinstance(app.screen, ConfirmScreen))
        await run.pilot.press("y")
        assert (await run.finished()).reason == "stopped"


async def test_ctl_step_repeated_while_a_pause_is_pending_records_one_step_and_says_so(
    tmp_path: Path, answer_task: Path
) -> None:
    """`mlra ctl RUN step` twice while the action in hand runs: the second recorded a
    second step each time (the console's second `n` recorded nothing). Now both go
    through the run's one `step`: the second records nothing and its answer says so,
    and a `n` after them records nothing either."""
    script = worker(turn("count", call("python", code=UNTIL_STOPPED)), ANSWER, REPORT)
    async with live(tmp_path, answer_task, script) as run:
        await run.watch.wait(is_(ev.ToolOutput))  # a long count: the action in hand
        step = CtlRequest(op="step", client="ctl")
        with run.controller.acting_as("ctl"):
            first = act(run.controller, step)
        assert first == "the action in hand finishes, then paused"
        recorded = await run.watch.wait(is_(ev.Control, action="step"))
        assert recorded.source == "ctl"
        with run.controller.acting_as("ctl"):
            again = act(run.controller, step)
        assert again == "already pausing after the action in hand: nothing more recorded"
        await run.pilot.press("n")  # the key agrees: nothing more either
        await run.pilot.press("space")  # pause now
        await run.watch.wait(is_(ev.Control, action="pause"))
        steps = [e for e in run.watch.events if isinstance(e, ev.Control) and e.action == "step"]
        assert len(steps) == 1
        await run.pilot.press("s")
        await run.shown(lambda app: isinstance(app.screen, ConfirmScreen))
        await run.pilot.press("y")
        assert (await run.finished()).reason == "stopped"


def _text(transcript: TranscriptPane) -> str:
    return "\n".join(str(w.render()) for w in transcript.query("*"))
