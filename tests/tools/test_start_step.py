"""A start's step made in a thread is undone once, whenever its start is cancelled
(tools/sandbox/start_step.py): before the step ends, after it ended but before the start
saw it, or while it hangs past its bound."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from mlra.tools.sandbox.start_step import Pending, made_or_undone

WAIT_S = 30.0


class Step:
    """A step that makes a numbered thing and records what was undone."""

    def __init__(self) -> None:
        self.made: list[int] = []
        self.undone: list[int] = []
        self.started = threading.Event()
        self.go = threading.Event()

    def make(self) -> int:
        self.started.set()
        assert self.go.wait(WAIT_S)
        self.made.append(len(self.made))
        return self.made[-1]

    def undo(self, made: int) -> None:
        self.undone.append(made)


async def test_a_step_cancelled_as_it_runs_is_undone_before_the_cancellation_goes_on() -> None:
    """Its thread undoes what it made as it ends, and the start waits for that."""
    step = Step()
    starting = asyncio.ensure_future(made_or_undone(step.make, step.undo, WAIT_S))
    assert await asyncio.get_running_loop().run_in_executor(None, step.started.wait, WAIT_S)
    starting.cancel()
    await asyncio.sleep(0)  # one turn: the start is told, and waits for its thread
    assert not starting.done()
    step.go.set()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert step.made == [0] and step.undone == [0]


async def test_a_step_that_ended_before_its_start_saw_it_is_undone_once() -> None:
    """Cancelled once the thread handed its result back, before the start resumed: the
    start undoes it (the thread does not)."""
    loop = asyncio.get_running_loop()
    one = ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(one)
    step = Step()
    starting = asyncio.ensure_future(made_or_undone(step.make, step.undo, WAIT_S))
    with ThreadPoolExecutor(max_workers=1) as other:
        assert await loop.run_in_executor(other, step.started.wait, WAIT_S)
    step.go.set()
    # The loop held (the start cannot resume) until the one thread has ended the step.
    one.submit(lambda: None).result(timeout=WAIT_S)
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert step.made == [0] and step.undone == [0]


async def test_a_step_that_hangs_lets_the_cancellation_go_on_and_undoes_itself() -> None:
    step = Step()
    starting = asyncio.ensure_future(made_or_undone(step.make, step.undo, 0.01))
    await asyncio.sleep(0)
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting  # the step still held
    assert step.made == [] and step.undone == []
    step.go.set()
    await asyncio.get_running_loop().shutdown_default_executor()
    assert step.made == [0] and step.undone == [0]


async def test_a_step_that_fails_has_nothing_undone_and_its_error_is_raised() -> None:
    def refused() -> int:
        raise OSError("no uid could be claimed")

    undone: list[int] = []
    with pytest.raises(OSError, match="no uid"):
        await made_or_undone(refused, undone.append, WAIT_S)
    assert undone == []


async def test_a_step_not_cancelled_hands_back_what_it_made() -> None:
    step = Step()
    step.go.set()
    assert await made_or_undone(step.make, step.undo, WAIT_S) == 0
    assert step.undone == []


def test_a_step_handed_back_as_the_loop_shuts_down_is_undone() -> None:
    """A loop that shuts down (asyncio.run's end) cancels every task at once: the start's
    and, before, the task that awaited the step's thread, whose result was then never
    read, so neither the start (the thread handed it back) nor the thread undid it."""
    step = Step()

    async def main() -> None:
        one = ThreadPoolExecutor(max_workers=1)
        asyncio.get_running_loop().set_default_executor(one)
        starting = asyncio.ensure_future(made_or_undone(step.make, step.undo, WAIT_S))
        await asyncio.sleep(0)  # the start awaits its step
        step.go.set()
        # The loop held (the start cannot resume) until the one thread has ended the step.
        one.submit(lambda: None).result(timeout=WAIT_S)
        assert not starting.done()
        # Returned with the start pending: asyncio.run cancels every task left.

    asyncio.run(main())
    assert step.made == [0] and step.undone == [0]


async def test_a_step_past_its_bound_is_held_for_a_close_to_wait_for() -> None:
    """The start gave up waiting: what the step still uses (the uid its container runs
    as) is given back only once its thread has undone what it made."""
    step = Step()
    pending = Pending()
    starting = asyncio.ensure_future(made_or_undone(step.make, step.undo, 0.01, pending))
    assert await asyncio.get_running_loop().run_in_executor(None, step.started.wait, WAIT_S)
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting  # the step still held
    closing = asyncio.ensure_future(pending.ended())
    await asyncio.sleep(0)
    assert not closing.done() and step.undone == []
    step.go.set()
    await closing
    assert step.made == [0] and step.undone == [0]
