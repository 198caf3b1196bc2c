"""The deadline's watch (agent/loop/drive.py `watch_deadline`) against a limit set while
it waits: it used to sleep on (up to 5 s) to the deadline it last read, so an attempt
whose limit fell went on past it, its worker taking steps with no time left."""

from __future__ import annotations

import asyncio

from mlra.agent.loop.clock import RunClock
from mlra.agent.loop.controls import Controls
from mlra.agent.loop.drive import watch_deadline


async def _turns(n: int = 5) -> None:
    """Lets the event loop run what is ready, `n` times over."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_limit_cut_while_the_watch_waits_ends_the_run_at_once() -> None:
    clock = RunClock(3600.0)
    clock.start()
    watch = asyncio.ensure_future(watch_deadline(clock, Controls()))
    await _turns()
    assert not watch.done()
    clock.limit_s = clock.elapsed()  # nothing left
    await _turns()
    assert watch.done() and watch.result().reason == "deadline"


async def test_a_raised_limit_keeps_the_run_going() -> None:
    clock = RunClock(3600.0)
    clock.start()
    watch = asyncio.ensure_future(watch_deadline(clock, Controls()))
    await _turns()
    clock.limit_s = 7200.0
    await _turns()
    assert not watch.done()
    watch.cancel()
