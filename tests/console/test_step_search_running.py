"""`n` in a search that runs freely is a debugger's step over too: each running attempt
finishes its action in hand and pauses at its next step boundary, then the search pauses
(its clock still), the status bar saying so meanwhile and the log recording it for replay
and headless. It paused at once before, suspending every attempt's command mid-way."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents import attempt_runs
from mlra.agent.agents.run import agent_for
from mlra.agent.control.control_ops import act
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.state import AFTER_ACTION, AFTER_ATTEMPTS
from mlra.agent.run.controller import RunController
from mlra.console.apps.app import MlraApp
from mlra.console.text.event_lines import control_line
from mlra.console.text.headless import TranscriptDisplay
from mlra.control_socket import CtlRequest
from mlra.tasks.spec import TaskSpec, load_task
from tests.agent.test_search import _variant_task, greedy_search
from tests.console.test_console_controls import Watch, is_, status_line

GO = "until [ -e go ]; do sleep 0.05; done; "
"""What each attempt's recipe command does before it answers: waits for a file `go` in
its workspace (`_go`), so the test, not the clock, says when its action in hand ends."""

PAUSING = "pausing after the attempts' actions in hand"
"""The status bar while a search's step waits on its attempts' actions in hand."""


def _go_task(answer_task: Path, tmp_path: Path) -> TaskSpec:
    """The variant task (41, then 42) whose recipe command waits for `go` (`GO`)."""
    task_dir = _variant_task(answer_task, tmp_path)
    toml = (task_dir / "task.toml").read_text()
    toml = toml.replace(
        'variants = [{}, { n = "40" }, { n = "42" }, { n = "43" }]', 'variants = [{}, { n = "42" }]'
    )
    toml = toml.replace('"echo {n}', f'"{GO}echo {{n}}')
    (task_dir / "task.toml").write_text(toml)
    return load_task(task_dir)


def _go(controller: RunController, attempt: str) -> None:
    """Let the attempt's recipe command, waiting for it, answer and end."""
    (controller.run_dir / "attempts" / attempt / "workspace" / "go").touch()


def _waiting(controller: RunController, attempt: str) -> bool:
    """The attempt's recipe command waits for its `go`: its action in hand."""
    events = _log(controller, attempt)
    calls = {e.call_id for e in events if isinstance(e, ev.ToolCall) and GO in str(e.arguments)}
    began = {e.call_id for e in events if isinstance(e, ev.ToolStarted)} & calls
    ended = {e.call_id for e in events if isinstance(e, ev.ToolResult)}
    return bool(began - ended)


def _log(controller: RunController, attempt: str) -> list[ev.Event]:
    log = controller.run_dir / "attempts" / attempt / "events.jsonl"
    return read_events(log) if log.is_file() else []


def _go_call(events: list[ev.Event]) -> str:
    """The call id of the attempt's recipe command, the one that waits for `go`."""
    return next(e.call_id for e in events if isinstance(e, ev.ToolCall) and GO in str(e.arguments))


def _paused_on_step(controller: RunController, attempt: str) -> bool:
    """The attempt paused after its action in hand (a step's pause, in its log)."""
    return any(is_(ev.Control, action="pause", source="step")(e) for e in _log(controller, attempt))


async def test_n_in_a_running_search_pauses_each_attempt_after_its_action_then_the_search(
    tmp_path: Path, answer_task: Path
) -> None:
    """Both attempts in their recipe command, waiting for `go` (the test, not a clock,
    ends it: it relied on both being inside 4 s sleeps at once, the bar seen before they
    ended). a1's ends: a1 pauses, the search runs on, a2 in hand; a2's ends: it pauses."""
    controller = greedy_search(_go_task(answer_task, tmp_path), tmp_path, 2, attempts_parallel=2)
    controller.prepare()
    watch = Watch(controller)
    app = MlraApp(controller=controller, make_agent=agent_for)
    async with app.run_test(size=(160, 48)) as pilot:

        async def until(check: Callable[[], bool], timeout: float = 60) -> None:
            async with asyncio.timeout(timeout):
                while not check():
                    await pilot.pause(0.02)

        await until(lambda: all(_waiting(controller, a) for a in ("a1", "a2")))
        assert not controller.controls.paused
        await pilot.press("n")
        step = await watch.wait(is_(ev.Control, action="step"))
        assert step.text == AFTER_ATTEMPTS
        # While the attempts finish theirs, the bar says the pause to come.
        await until(lambda: PAUSING in status_line(app))
        _go(controller, "a1")
        await until(lambda: _paused_on_step(controller, "a1"))
        # a1 paused (its pause tells the search at once): a2's action is still in hand,
        # so the search runs on, saying so.
        await pilot.pause()
        assert _waiting(controller, "a2") and not _paused_on_step(controller, "a2")
        assert not any(is_(ev.Control, action="pause")(e) for e in watch.events)
        assert not controller.controls.paused and controller.state.pausing
        assert PAUSING in status_line(app)
        _go(controller, "a2")
        paused = await watch.wait(is_(ev.Control, action="pause"), timeout=60)
        assert paused.source == "step"
        assert controller.controls.paused and not controller.clock.running
        # Said as what it was, in the transcript and headless (it read "paused after one
        # action", the words of a step's pause in a single run).
        assert isinstance(paused, ev.Control)
        said = "paused after the attempts' actions in hand"
        assert control_line(paused) == f"{said}: n steps again, Space resumes"
        out = io.StringIO()
        TranscriptDisplay(out, rich=False).on_event(paused)
        assert f"{said}: mlra ctl RUN step runs the next" in out.getvalue()
        for attempt in ("a1", "a2"):
            events = _log(controller, attempt)
            controls = [e for e in events if isinstance(e, ev.Control)]
            assert [(c.action, c.text, c.source) for c in controls[:2]] == [
                ("step", AFTER_ACTION, "run"),
                ("pause", None, "step"),
            ], attempt
            # The waiting command ran to its end, not suspended mid-way, and no action
            # of the attempt began after it before it paused.
            call = _go_call(events)
            ran = next(e for e in events if isinstance(e, ev.ToolResult) and e.call_id == call)
            assert ran.ok, attempt
            assert not any(
                isinstance(e, ev.ToolStarted) and ran.seq < e.seq < controls[1].seq for e in events
            ), attempt
        await until(lambda: app.state.phase == "paused")
        assert "pausing" not in status_line(app)
        await pilot.press("space")  # resume: the search goes on to its end
        await watch.wait(is_(ev.RunFinished), timeout=120)
        async with asyncio.timeout(120):
            while app.result is None:
                await pilot.pause(0.02)
    assert app.result is not None and app.result.attempts is not None
    assert app.result.attempts.tried == 2


async def test_a_step_asked_again_while_a_running_search_pauses_records_nothing_more(
    tmp_path: Path, answer_task: Path
) -> None:
    """`mlra ctl RUN step`, then `n`, while a search's step waits on its attempts' actions
    in hand: the second went to the attempts' turn (the search, on a step, is in step
    mode), recorded `step target=a1 source=ctl`, let an attempt go on, and the search
    read as paused while it ran (the bar PAUSED, Space a resume). Now both record
    nothing, and ctl says the pause is pending."""
    controller = greedy_search(_go_task(answer_task, tmp_path), tmp_path, 2, attempts_parallel=2)
    controller.prepare()
    watch = Watch(controller)
    app = MlraApp(controller=controller, make_agent=agent_for)
    async with app.run_test(size=(160, 48)) as pilot:

        async def until(check: Callable[[], bool], timeout: float = 60) -> None:
            async with asyncio.timeout(timeout):
                while not check():
                    await pilot.pause(0.02)

        await until(lambda: all(_waiting(controller, a) for a in ("a1", "a2")))
        await pilot.press("n")
        await watch.wait(is_(ev.Control, action="step"))
        await until(lambda: PAUSING in status_line(app))
        with controller.acting_as("ctl"):
            again = act(controller, CtlRequest(op="step", client="ctl"))
        assert again.startswith("already pausing after the action in hand"), again
        await pilot.press("n")
        await pilot.pause()
        steps = [e for e in watch.events if isinstance(e, ev.Control) and e.action == "step"]
        assert [(s.target, s.source) for s in steps] == [(None, "user")]
        assert not controller.controls.paused and not controller.state.paused
        assert controller.state.pausing and app.state.phase == "running"
        assert PAUSING in status_line(app) and "PAUSED" not in status_line(app)
        for attempt in ("a1", "a2"):  # each still in its action in hand, asked to pause once
            assert _waiting(controller, attempt), attempt
            controls = [e for e in _log(controller, attempt) if isinstance(e, ev.Control)]
            assert [(c.action, c.source) for c in controls] == [("step", "run")], attempt
        for attempt in ("a1", "a2"):
            _go(controller, attempt)
        paused = await watch.wait(is_(ev.Control, action="pause"), timeout=60)
        assert paused.source == "step"
        controller.request_stop(evaluate=False)
        await watch.wait(is_(ev.RunFinished), timeout=120)


async def test_n_and_ctl_say_what_the_step_did(
    tmp_path: Path, answer_task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step while a1 is started but its run not yet made (no attempt to pause yet: the
    search alone pauses after its action in hand, so recorded): ctl chose its words from
    the attempts the log says run ("each attempt ... then the search"), and `n` chose
    its toast from the run's state, not from what the step did (nothing, the run
    stopping). Both now say what the run's step did."""
    made, go = asyncio.Event(), threading.Event()
    loop = asyncio.get_running_loop()
    real_child = attempt_runs._child

    def held_child(*args: Any) -> Any:  # a1's run made, held until the test says
        child = real_child(*args)
        loop.call_soon_threadsafe(made.set)
        go.wait(60)
        return child

    monkeypatch.setattr(attempt_runs, "_child", held_child)
    controller = greedy_search(_go_task(answer_task, tmp_path), tmp_path, 1)
    controller.prepare()
    watch = Watch(controller)
    app = MlraApp(controller=controller, make_agent=agent_for)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await asyncio.wait_for(made.wait(), 60)
            assert controller.state.attempts.running and not controller.attempts.children
            with controller.acting_as("ctl"):
                said = act(controller, CtlRequest(op="step", client="ctl"))
            step = await watch.wait(is_(ev.Control, action="step"))
            assert step.text == AFTER_ACTION  # the search's own action in hand alone
            assert said == "the action in hand finishes, then paused"
            controller.request_stop(evaluate=False)
            await pilot.press("n")  # stopping: nothing to step
            await pilot.pause()
            toasts = [str(n.message) for n in app._notifications]
            assert toasts == ["The run is stopping: nothing to step."]
            go.set()
            await watch.wait(is_(ev.RunFinished), timeout=120)
    finally:
        go.set()
