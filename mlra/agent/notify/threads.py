"""Blocking work of a destination (an HTTP POST, a write to the terminal) in a daemon
thread of its own, awaited on the event loop.

Not `asyncio.to_thread`: the loop's default executor is joined when `asyncio.run`
ends, so a POST stuck where no time-out reaches (a name lookup that hangs) would hold
the process's exit. A daemon thread is left behind instead, once the send's bound
has passed (agent/notify/dispatch.py).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable


async def in_daemon_thread(work: Callable[[], None], name: str) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(exc: BaseException | None) -> None:
        if done.done():
            return
        if exc is None:
            done.set_result(None)
        else:
            done.set_exception(exc)

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # handed to the awaiting task, raised there
            outcome: BaseException | None = exc
        else:
            outcome = None
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:
            pass  # the loop has closed: nobody waits any more

    threading.Thread(target=run, name=name, daemon=True).start()
    await done
