"""Seeing one started command through to its end, the same way in every sandbox.

A command is waited for with its time-out counted only while the run is not
paused, then its process group is killed (whatever it left in the background
ends with it), and its output read until the pipes close, or for a short grace
if a process that escaped the group holds them. If the caller is cancelled at
any point the group is still dead before the cancellation goes on: a stopped
run must not leave its training job holding the GPU. Sandboxes differ only in
how they signal and kill a command, which subclasses supply.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from mlra.tools.sandbox.output import OutputSink
from mlra.tools.sandbox.time_out import TimeOut

T = TypeVar("T")

PIPE_DRAIN_GRACE_S = 2.0
"""How long output is still read after the command's process group is dead: only
a process that left the group (setsid) can keep the pipes open past that."""
LEFT_OPEN_NOTE = (
    "\n[a process that left the command's process group still holds its "
    "output open; it was not read further]\n"
)


class RunningCommand(abc.ABC):
    """A started command: `ended` resolves when it exits, `drained` when its output
    has all been read (the same future where the two cannot be told apart)."""

    def __init__(
        self,
        sink: OutputSink,
        ended: asyncio.Future[None],
        drained: asyncio.Future[None],
    ) -> None:
        self.sink = sink
        self.ended = ended
        self.drained = drained
        self._suspended_at: float | None = None
        self._suspended_s = 0.0
        self._resumed = asyncio.Event()
        self._resumed.set()

    @abc.abstractmethod
    async def kill(self) -> None:
        """Kill the command's process group and what it started; return once they are dead."""

    def _stop(self) -> None:
        """Stop the command's processes where they are (SIGSTOP), if the sandbox can here."""

    def _continue(self) -> None:
        """Let the processes `_stop` stopped go on."""

    def abandon(self) -> None:
        """Stop reading the command's output; it is not waited for any more."""

    def suspend(self) -> None:
        if self._suspended_at is None and not self.ended.done():
            self._stop()
            self._suspended_at = time.monotonic()
            self._resumed.clear()

    def resume(self) -> None:
        if self._suspended_at is not None:
            self._continue()
            self._suspended_s += time.monotonic() - self._suspended_at
            self._suspended_at = None
            self._resumed.set()

    async def wait(self, timeout: float | TimeOut, started: float) -> bool:
        """Wait for the command to exit; True if it ran out of time first.

        Time spent suspended (the run paused) does not count against the time-out. A
        `TimeOut` is read again each time the one read is spent: the run may have raised
        it meanwhile (tools/sandbox/time_out.py).
        """
        ended = self.ended
        while not ended.done():
            if self._suspended_at is not None:
                resumed = asyncio.ensure_future(self._resumed.wait())
                try:
                    await asyncio.wait([ended, resumed], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    resumed.cancel()
                continue
            left = float(timeout) - (time.monotonic() - started - self._suspended_s)
            if left <= 0:
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(ended), timeout=left)
        return False

    async def see_through(self, timeout: float | TimeOut, started: float) -> bool:
        """Wait, kill the group, and read the output to its end; True if it timed out.

        On any exception, cancellation included, the group is killed before it
        propagates.
        """
        try:
            timed_out = await self.wait(timeout, started)
            await self.kill()
            try:
                await asyncio.wait_for(asyncio.shield(self.drained), timeout=PIPE_DRAIN_GRACE_S)
            except TimeoutError:
                self.sink.note(LEFT_OPEN_NOTE)
                self.abandon()
        except BaseException:
            await finish_despite_cancel(self.kill())
            self.abandon()
            raise
        return timed_out


async def finish_despite_cancel(aw: Awaitable[T]) -> T:
    """Await cleanup to its end even if the caller is cancelled meanwhile, then re-raise.

    Used where the process group must be dead before anything else happens: a
    cancelled run that returned early would leave its training job running.
    """
    task = asyncio.ensure_future(aw)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result


async def spawned(spawning: Awaitable[T], kill: Callable[[T], Awaitable[None]]) -> T:
    """A new process's handle, once asyncio has connected its pipes. A cancellation that
    lands meanwhile (the process exists, its pipes are being connected: a few turns of
    the loop) waits for that, then `kill`s what it made (its whole group, then waits for
    its end), before it goes on. Left to asyncio, the cancelled spawn killed the leader
    alone and waited for its pipes to close, which a child it had started held: `bash -c
    "sleep 300; ..."` stopped as it began (an attempt a person stopped at once) hung
    until its `sleep` ended. A loop's shutdown that cancels the spawn's own task (not the
    caller's) still meets asyncio's clean-up."""
    task = asyncio.ensure_future(spawning)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await finish_despite_cancel(_kill_spawned(task, kill))
        raise


async def _kill_spawned(task: asyncio.Future[T], kill: Callable[[T], Awaitable[None]]) -> None:
    try:
        made = await task
    except Exception:  # it never started (the caller's cancellation says the rest)
        return
    await kill(made)
