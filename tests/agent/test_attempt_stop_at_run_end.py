"""A person's stop of an attempt as the run's deadline stops them all (agent/loop/attempts.py
`stop_all`, agent/control/steering.py `stop_attempt`): the manager alone, over a stand-in
for its run and an attempt whose run only waits, so the order of the two is the test's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlra import events as ev
from mlra.agent.loop.attempts import AttemptManager, AttemptRefused
from mlra.agent.record.state import fold

USER = "stopped by the user"
DEADLINE = "deadline: time limit reached"


def _manager(tmp_path: Path, closing: asyncio.Event) -> tuple[AttemptManager, list[ev.Event]]:
    """A manager running a1, whose run, once cancelled, takes until `closing` is set to
    close (its sandbox, say); and what it appends to its run's log."""
    started = ev.AttemptStarted(attempt="a1", folder="attempts/a1")
    appended: list[ev.Event] = []
    run = SimpleNamespace(
        run_dir=tmp_path,
        append=appended.append,
        state=fold([started]),
        catchup=SimpleNamespace(replaying=False),
    )
    manager = AttemptManager(run)  # type: ignore[arg-type]  # all it reads here

    async def runs_then_closes(*_: object) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await closing.wait()

    manager.launcher = runs_then_closes
    manager._launch(started, resume=False)
    return manager, appended


async def test_a_persons_stop_while_the_deadline_stops_the_attempts_is_refused(
    tmp_path: Path,
) -> None:
    """The person stopped a1 while the run's deadline was stopping it: their stop was
    taken ("stopping attempt a1"), and a1 read "out of time", by the run's deadline.
    Now it is refused, saying the run is ending; a1 reads as the deadline ended it."""
    closing = asyncio.Event()
    manager, appended = _manager(tmp_path, closing)
    await asyncio.sleep(0)  # a1 runs
    ending = asyncio.ensure_future(manager.stop_all(DEADLINE, deadline=True))
    await asyncio.sleep(0)  # the deadline's stop began; a1 still closing
    assert not ending.done()
    with pytest.raises(AttemptRefused, match="the run is ending"):
        await asyncio.wait_for(manager.stop("a1", USER), 5)
    closing.set()
    await asyncio.wait_for(ending, 10)
    (finished,) = [e for e in appended if isinstance(e, ev.AttemptFinished)]
    assert (finished.status, finished.run_deadline) == ("out of time", True), finished


async def test_a_persons_stop_taken_before_the_deadline_stops_the_attempts_wins(
    tmp_path: Path,
) -> None:
    """The person's stop, taken at once (`stop_now`), before the deadline's stop ran:
    a1 reads stopped by them, not out of time."""
    closing = asyncio.Event()
    manager, appended = _manager(tmp_path, closing)
    await asyncio.sleep(0)
    manager.stop_now("a1", USER)
    ending = asyncio.ensure_future(manager.stop_all(DEADLINE, deadline=True))
    closing.set()
    await asyncio.wait_for(ending, 10)
    (finished,) = [e for e in appended if isinstance(e, ev.AttemptFinished)]
    assert (finished.status, finished.why, finished.run_deadline) == ("stopped", USER, False)
