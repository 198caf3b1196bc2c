"""Stepping a paused search (the console's `n`, `mlra ctl RUN step`: agent/control/
steering.py): one step is one action of one agent, the search's own where its agent
waits for leave, else one running attempt's, each in turn. A real greedy search of the
small `answer` task's recipe variants, started paused."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents import attempt_runs
from mlra.agent.agents.run import agent_for
from mlra.agent.control.steering import next_in_turn
from mlra.agent.record.eventlog import read_events
from mlra.agent.run import controller as controller_mod
from mlra.agent.run.controller import RunController
from mlra.console.text.event_lines import control_line
from tests.agent.test_search import greedy_search, sleeping_variant_task


async def _until(what: str, check: Callable[[], bool]) -> None:
    """Wait until `check()` holds (the run's state, moved by its own tasks)."""
    async with asyncio.timeout(120):
        while not check():  # noqa: ASYNC110 (the runs' state)
            await asyncio.sleep(0.02)


def _actions(controller: RunController, attempt: str) -> int:
    """The tool calls an attempt's own run has begun, from its log."""
    log = controller.run_dir / "attempts" / attempt / "events.jsonl"
    return sum(isinstance(e, ev.ToolStarted) for e in read_events(log)) if log.is_file() else 0


def _waits(controller: RunController, attempt: str) -> bool:
    """The attempt's run stands paused at its gate, before its next action."""
    child = controller.attempts.children.get(attempt)
    return child is not None and child.controls.paused and child.controls.at_gate


async def test_a_step_of_a_paused_search_is_one_action_of_one_agent(
    tmp_path: Path, answer_task: Path
) -> None:
    """Two attempts running, both paused, the search waiting on them: each `n` ran one
    action of every attempt (and the search's own), so `n` never meant one action.
    Now the search's steps start a1, a2 and its wait; then each `n` is one action of
    one attempt, a1's, then a2's, the step's control naming it."""
    task = sleeping_variant_task(
        answer_task, tmp_path, '{ n = "41", s = "0" }', '[{}, { n = "42" }]'
    )
    controller = greedy_search(task, tmp_path, 2, attempts_parallel=2, start_paused=True)
    run = asyncio.ensure_future(controller.run(agent_for))
    controls = controller.controls
    try:
        for _ in range(3):  # attempt_start a1, attempt_start a2, attempt_wait
            await _until("the search at its gate", lambda: controls.paused and controls.at_gate)
            controller.step()
            await asyncio.sleep(0)
        await _until(
            "both attempts paused at their gates",
            lambda: all(_waits(controller, a) for a in ("a1", "a2")),
        )
        await _until("the search inside its wait", lambda: not controls.at_gate)
        # Its step's action is that wait: it pauses, its clock stands still (it ran on
        # while the person looked, nothing moving).
        await _until("the search paused in its wait", lambda: controls.paused)
        assert not controller.clock.running
        assert (_actions(controller, "a1"), _actions(controller, "a2")) == (0, 0)

        controller.step()  # a1's first action, a2 stays
        await _until("a1 took one action", lambda: _actions(controller, "a1") == 1)
        await _until("a1 paused again", lambda: _waits(controller, "a1"))
        assert (_actions(controller, "a1"), _actions(controller, "a2")) == (1, 0)

        controller.step()  # now a2's
        await _until("a2 took one action", lambda: _actions(controller, "a2") == 1)
        await _until("a2 paused again", lambda: _waits(controller, "a2"))
        assert (_actions(controller, "a1"), _actions(controller, "a2")) == (1, 1)
        assert controls.paused and controller.state.paused  # the search stood still: so said
    finally:
        controller.resume()
    result = await asyncio.wait_for(run, 120)
    steps = [
        e
        for e in read_events(controller.run_dir / "events.jsonl")
        if isinstance(e, ev.Control) and e.action == "step"
    ]
    assert [s.target for s in steps] == [None, None, None, "a1", "a2"]
    assert control_line(steps[3]) == "you: stepped one action of attempt a1"
    assert result.attempts is not None and result.attempts.tried == 2


def test_each_attempt_takes_its_turn_by_number() -> None:
    assert next_in_turn(["a2", "a1"], None) == "a1"
    assert next_in_turn(["a1", "a2", "a10"], "a2") == "a10"
    assert next_in_turn(["a1", "a2", "a10"], "a10") == "a1"
    assert next_in_turn(["a3", "a5"], "a4") == "a5"  # a4 ended meanwhile


async def test_a_stepped_action_of_an_attempt_counts_on_the_searchs_clock(
    tmp_path: Path, answer_task: Path
) -> None:
    """The search paused in its wait, a step lets a1 take one action, one that sleeps a
    second: the search's clock stood still through it, so a person stepping a search
    through could spend any time working without its time limit counting any. It runs
    while the action does, and stands still again once a1 pauses."""
    task = sleeping_variant_task(answer_task, tmp_path, '{ n = "42", s = "1" }', "[{}]")
    controller = greedy_search(task, tmp_path, 1, start_paused=True)
    run = asyncio.ensure_future(controller.run(agent_for))
    controls = controller.controls
    try:
        for _ in range(2):  # attempt_start a1, attempt_wait
            await _until("the search at its gate", lambda: controls.paused and controls.at_gate)
            controller.step()
            await asyncio.sleep(0)
        await _until("a1 paused at its gate", lambda: _waits(controller, "a1"))
        await _until("the search paused in its wait", lambda: controls.paused)
        await _until("its clock still", lambda: not controller.clock.running)
        child = controller.attempts.children["a1"]
        assert not child.clock.running, "a1's clock running at its gate"
        before, child_before = controller.clock.elapsed(), child.clock.elapsed()
        controller.step()  # a1's first action: the recipe's `sleep 1; echo 42`
        await _until("a1 took one action", lambda: _actions(controller, "a1") == 1)
        await _until("a1 paused again", lambda: _waits(controller, "a1"))
        assert not controller.clock.running  # standing still again, the search paused
        assert not child.clock.running, "a1's clock running at its gate"
        assert child.clock.elapsed() - child_before >= 1.0  # the sleep, on a1's clock
        assert controller.clock.elapsed() - before >= 1.0  # and on the search's
        assert controls.paused and controller.state.paused
    finally:
        controller.resume()
    result = await asyncio.wait_for(run, 120)
    assert result.attempts is not None and result.attempts.tried == 1


async def test_an_attempt_made_while_stepped_then_resumed_runs_with_the_search(
    tmp_path: Path, answer_task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step lets a paused search start a1; the search resumes while a1's run is being
    made (its worker thread read the search stepped): a1 started paused, the resume not
    reaching it, and stood paused while the search ran (it waited on a1 for ever). It
    takes the search's state as it registers: running, it runs."""
    made, go = asyncio.Event(), threading.Event()
    loop = asyncio.get_running_loop()
    real_child = attempt_runs._child

    def held_child(*args: Any) -> Any:  # the attempt's run made, held until the test says
        child = real_child(*args)
        loop.call_soon_threadsafe(made.set)
        go.wait(60)
        return child

    monkeypatch.setattr(attempt_runs, "_child", held_child)
    task = sleeping_variant_task(answer_task, tmp_path, '{ n = "42", s = "0" }', "[{}]")
    controller = greedy_search(task, tmp_path, 1, start_paused=True)
    run = asyncio.ensure_future(controller.run(agent_for))
    controls = controller.controls
    try:
        await _until("the search at its gate", lambda: controls.paused and controls.at_gate)
        controller.step()  # attempt_start a1
        await asyncio.wait_for(made.wait(), 60)
        controller.resume()
    finally:
        go.set()
    log = controller.run_dir / "attempts" / "a1" / "events.jsonl"

    def a1_moved_or_paused() -> bool:
        events = read_events(log) if log.is_file() else []
        return any(isinstance(e, ev.ToolStarted | ev.Control) for e in events)

    try:
        await _until("a1's first action, or its pause", a1_moved_or_paused)
        controls_a1 = [e for e in read_events(log) if isinstance(e, ev.Control)]
        assert not controls_a1, "a1 started paused while the search ran"
    finally:
        controller.request_stop(evaluate=False)
    await asyncio.wait_for(run, 120)


async def test_an_attempt_registered_while_stepped_then_resumed_before_its_start_runs(
    tmp_path: Path, answer_task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, the resume after a1 registered but before its run started (its sandbox
    starting): a1 paused at its start (`start_paused`) while the search ran, and stayed
    so. The resume reaches it: it starts running."""
    starting, go = asyncio.Event(), asyncio.Event()
    real_start = controller_mod.start_run

    async def held_start(run: Any, *args: Any) -> None:  # a1's start held until the test says
        if run.config.attempt is not None:
            starting.set()
            await go.wait()
        await real_start(run, *args)

    monkeypatch.setattr(controller_mod, "start_run", held_start)
    task = sleeping_variant_task(answer_task, tmp_path, '{ n = "42", s = "0" }', "[{}]")
    controller = greedy_search(task, tmp_path, 1, start_paused=True)
    run = asyncio.ensure_future(controller.run(agent_for))
    controls = controller.controls
    log = controller.run_dir / "attempts" / "a1" / "events.jsonl"
    try:
        await _until("the search at its gate", lambda: controls.paused and controls.at_gate)
        controller.step()  # attempt_start a1
        await asyncio.wait_for(starting.wait(), 60)
        controller.resume()
        go.set()

        def a1_controls() -> list[ev.Control]:
            events = read_events(log) if log.is_file() else []
            return [e for e in events if isinstance(e, ev.Control)]

        def a1_moved_or_paused_at_start() -> bool:
            return _actions(controller, "a1") > 0 or any(c.source == "start" for c in a1_controls())

        await _until("a1's first action, or its pause at its start", a1_moved_or_paused_at_start)
        assert not [c for c in a1_controls() if c.action == "pause"]
        assert _actions(controller, "a1") > 0
    finally:
        go.set()
        controller.request_stop(evaluate=False)
    await asyncio.wait_for(run, 120)


async def test_a_pause_ends_the_searchs_wait_for_its_attempts_to_stand_still(
    tmp_path: Path, answer_task: Path
) -> None:
    """A step while the search ran: at its boundary it waits for its attempts' actions in
    hand (`pause_at_boundary`). The person pauses it, its attempt stopping (a pause does
    not reach that one, which then tells nothing): the wait went on until something else
    moved, the search not at its gate (`n` then stepped an attempt, not its own action)."""
    task = sleeping_variant_task(answer_task, tmp_path, '{ n = "42", s = "0" }', "[{}]")
    controller = greedy_search(task, tmp_path / "search", 1)
    controller.prepare()
    child = greedy_search(task, tmp_path / "attempt", 1)
    child.prepare()
    child.request_stop(evaluate=False)  # stopping: running yet, a pause no longer reaches it
    controller.attempts.children["a1"] = child
    controller.controls.pause_after_action()  # a step while it ran, its action in hand done
    waiting = asyncio.ensure_future(controller.pause_at_boundary())
    await asyncio.sleep(0)
    assert not waiting.done()  # a1 moves: the search waits for it
    controller.pause()
    await asyncio.wait_for(waiting, 10)
    assert controller.controls.paused
