"""A step while a search with a model supervisor runs (`n`, `mlra ctl RUN step`) is a
step over: the supervisor's turn in hand and each attempt's action in hand finish, then
the search pauses. A turn of two calls paused the search at its second call at once,
its pause pausing its attempts mid-command (agent/loop/tool_step.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.state import AFTER_ACTION, AFTER_ATTEMPTS, fold
from mlra.agent.run.controller import RunController
from tests.agent.test_search import _scripted_search, greedy_search
from tests.agent.test_search_stepping import _until
from tests.console.test_console_controls import Watch, is_
from tests.console.test_step_search_running import _go, _go_task, _log, _waiting
from tests.scripts import call, turn

GO = "until [ -e go ]; do sleep 0.05; done; echo 42 > answer.txt"
"""a1's command: it ends once the test makes a file `go` in its workspace."""


_TWO_CALLS = {
    "supervisor": [
        turn("", call("attempt_start", instructions="Write 42 into answer.txt")),
        {"hold": "go", **turn("", call("attempts"), call("attempts"))},
        turn("", call("attempt_wait", attempt="a1")),
        turn("", call("submit", attempt="a1")),
    ],
    "worker": [
        turn("", call("bash", command=GO)),
        turn("", call("report", summary="wrote 42")),
    ],
}
"""The supervisor starts a1 and, held until the test steps, takes a turn of two calls."""


def _a1(controller: RunController) -> list[ev.Event]:
    log = controller.run_dir / "attempts" / "a1" / "events.jsonl"
    return read_events(log) if log.is_file() else []


def _in_hand(controller: RunController) -> bool:
    """a1's command runs, waiting for its `go`."""
    events = _a1(controller)
    bash = {e.call_id for e in events if isinstance(e, ev.ToolCall) and e.tool == "bash"}
    began = {e.call_id for e in events if isinstance(e, ev.ToolStarted)} & bash
    return bool(began - {e.call_id for e in events if isinstance(e, ev.ToolResult)})


async def test_a_turn_of_two_calls_pauses_the_search_after_its_attempts_actions_in_hand(
    tmp_path: Path, answer_task: Path
) -> None:
    """A step while the supervisor thinks, a1's command running: the turn comes with two
    calls, the first the action in hand; at the second the search waits for a1's command
    to end and a1 to pause, then pauses (it paused at once, suspending a1 mid-command)."""
    script = _TWO_CALLS

    async def during(controller: RunController) -> None:
        try:
            await stepped(controller)
        finally:  # a failure ends the run, not left to its time limit
            controller.request_stop(evaluate=False)

    async def stepped(controller: RunController) -> None:
        watch = Watch(controller)
        async with asyncio.timeout(60):
            while not _in_hand(controller):  # noqa: ASYNC110 (a1's log, written by its run)
                await asyncio.sleep(0.01)
        assert controller.step() == "after_attempts"  # the supervisor's turn is held: thinking
        calls = await watch.wait(lambda e: isinstance(e, ev.ToolCall) and e.tool == "attempts")
        # The turn's second call is recorded, then the step boundary: the search waits
        # there on a1, its command still running, nothing paused.
        second = await watch.wait(is_(ev.ToolCall, tool="attempts"), after=calls.seq)
        assert not controller.controls.paused and not controller.state.paused
        assert _in_hand(controller)
        assert [(c.action, c.source) for c in _a1(controller) if isinstance(c, ev.Control)] == [
            ("step", "run")
        ]
        (controller.run_dir / "attempts" / "a1" / "workspace" / "go").touch()
        paused = await watch.wait(is_(ev.Control, action="pause"), timeout=60)
        assert paused.source == "step"
        events = _a1(controller)
        controls = [(c.action, c.text, c.source) for c in events if isinstance(c, ev.Control)]
        assert controls == [("step", AFTER_ACTION, "run"), ("pause", None, "step")]
        ran = next(e for e in events if isinstance(e, ev.ToolResult) and e.tool == "bash")
        assert ran.ok  # a1's command ran to its end
        # the search's second call waits, paused, not begun
        assert not any(isinstance(e, ev.ToolStarted) and e.seq > second.seq for e in watch.events)

    await _scripted_search(
        tmp_path / "runs",
        answer_task,
        script,
        during=during,
        release=("go", lambda c: c.state.pausing),
        search="llm",
        attempts=1,
    )


async def test_a_stop_while_the_search_waits_at_its_step_boundary_closes_the_call(
    tmp_path: Path, answer_task: Path
) -> None:
    """A stop while the search's second call waits at the step's boundary for a1's
    command: the call gets its result in the log (it was left open, no tool_result)."""

    async def during(controller: RunController) -> None:
        watch = Watch(controller)
        try:
            async with asyncio.timeout(60):
                while not _in_hand(controller):  # noqa: ASYNC110 (a1's log, written by its run)
                    await asyncio.sleep(0.01)
            assert controller.step() == "after_attempts"
            first = await watch.wait(is_(ev.ToolCall, tool="attempts"))
            second = await watch.wait(is_(ev.ToolCall, tool="attempts"), after=first.seq)
            box.append(second.call_id)
            assert _in_hand(controller) and not controller.controls.paused  # at the boundary
        finally:
            controller.request_stop(evaluate=False)

    box: list[str] = []
    controller, _result, _server = await _scripted_search(
        tmp_path / "runs",
        answer_task,
        _TWO_CALLS,
        during=during,
        release=("go", lambda c: c.state.pausing),
        search="llm",
        attempts=1,
    )
    events = read_events(controller.run_dir / "events.jsonl")
    assert box and box[0] in {e.call_id for e in events if isinstance(e, ev.ToolResult)}
    assert not any(isinstance(e, ev.ToolStarted) and e.call_id == box[0] for e in events)


async def test_a_step_while_a_paused_search_takes_its_stepped_action_pauses_it_after(
    tmp_path: Path, answer_task: Path
) -> None:
    """A paused search with an attempt, `n` running its own action (the supervisor's turn,
    held), then `n` again: the search pauses after its action in hand, a third `n` records
    nothing more. The second stepped a1 instead, its step read as the search paused while
    the search ran on."""
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Write 42 into answer.txt")),
            {"hold": "think", **turn("", call("attempts"))},
            turn("", call("attempt_wait", attempt="a1")),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="wrote 42")),
        ],
    }
    asked: list[bool] = []

    async def during(controller: RunController) -> None:
        watch, controls = Watch(controller), controller.controls
        children = controller.attempts.children
        try:
            await _until("the search at its gate", lambda: controls.paused and controls.at_gate)
            assert controller.step() == "one_action"  # its attempt_start
            await _until("a1, the search at its gate again", lambda: "a1" in children)
            await _until("the search at its gate", lambda: controls.paused and controls.at_gate)
            assert controller.step() == "one_action"  # its next turn, held
            await _until("its turn begun", lambda: not (controls.paused or controls.at_gate))
            step = controller.step()
            assert step == "after_attempts" and not controller.state.paused
            assert controller.step() == "pausing_already"
            asked.append(True)  # the turn goes on: its call, then the search pauses
            asked_step = await watch.wait(is_(ev.Control, action="step", text=AFTER_ATTEMPTS))
            pause = is_(ev.Control, action="pause", source="step")
            await watch.wait(pause, after=asked_step.seq, timeout=60)
            assert controller.state.paused
            steps = [e for e in watch.events if isinstance(e, ev.Control) and e.action == "step"]
            assert [(e.target, e.text) for e in steps] == [(None, None)] * 2 + [
                (None, AFTER_ATTEMPTS)
            ]
        finally:
            controller.request_stop(evaluate=False)

    await _scripted_search(
        tmp_path / "runs",
        answer_task,
        script,
        during=during,
        release=("think", lambda c: bool(asked)),
        search="llm",
        attempts=1,
        start_paused=True,
    )


def test_an_attempts_step_leaves_the_search_paused_or_running_as_it_was() -> None:
    """A step with a target (one attempt's action) read as the search paused, even where
    the search ran on."""
    step = ev.Control(action="step", target="a1")
    assert fold([ev.Control(action="pause"), step]).paused
    assert not fold([ev.Control(action="pause"), ev.Control(action="step"), step]).paused


async def test_a_step_while_an_attempt_closes_writes_nothing_after_its_end(
    tmp_path: Path, answer_task: Path
) -> None:
    """`n` while the search runs and a1's run has ended but closes yet (its sandbox
    closing, still the search's): a1's log took a step after its `run_finished`."""
    controller = greedy_search(_go_task(answer_task, tmp_path), tmp_path, 1)
    watch = Watch(controller)
    run = asyncio.ensure_future(controller.run(agent_for))
    closing, closed = asyncio.Event(), asyncio.Event()
    try:
        async with asyncio.timeout(60):
            while not _waiting(controller, "a1"):  # noqa: ASYNC110 (a1's log)
                await asyncio.sleep(0.01)
        child = controller.attempts.children["a1"]
        assert child.sandbox is not None
        close = child.sandbox.close

        async def held_close() -> None:  # a1 stays in its close until the test says
            closing.set()
            await closed.wait()
            await close()

        child.sandbox.close = held_close  # type: ignore[method-assign]
        _go(controller, "a1")
        await asyncio.wait_for(closing.wait(), 60)
        assert child.state.finished is not None and "a1" in controller.attempts.children
        assert controller.step() == "after_attempts"
        await watch.wait(is_(ev.Control, action="step"))
    finally:
        closed.set()
        controller.request_stop(evaluate=False)
    await asyncio.wait_for(run, 120)
    events = _log(controller, "a1")
    ended = next(e for e in events if isinstance(e, ev.RunFinished))
    assert not [e for e in events if e.seq > ended.seq]
