"""What the console uses of a live run: the run controller it drives in its own process,
or a run in another process it is attached to (console/text/attach_run.py).

A protocol, so both are checked against the same list and the console cannot come to
lean on something only one of them has (pyright holds each to it). Read-only members
are properties here, so the controller's plain attributes satisfy them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from mlra import events as ev
from mlra.agent.loop.controls import Breakpoint
from mlra.agent.loop.drive import Agent
from mlra.agent.record.run_result import RunResult
from mlra.agent.record.state import RunState
from mlra.console.panes.files import FileSource


class ControlsView(Protocol):
    @property
    def paused(self) -> bool: ...

    @property
    def hold_at_breaks(self) -> bool: ...

    @property
    def breakpoints(self) -> list[Breakpoint]: ...

    def edit_problem(self, call_id: str, arguments: dict[str, Any]) -> str | None: ...


class ClockView(Protocol):
    def elapsed(self) -> float: ...


class JobsView(Protocol):
    def last_line(self, job_id: str) -> str | None: ...

    def running_ids(self) -> list[tuple[str, str]]: ...


class OutputFeed(Protocol):
    def watch_output(self, watcher: Callable[[ev.ToolOutput], None]) -> None: ...


class AttemptsView(Protocol):
    def submittable(self, attempt: str) -> ev.AttemptFinished: ...

    def child(self, attempt: str) -> Any: ...


class ClosableProvider(Protocol):
    async def aclose(self) -> None: ...


class LiveRun(Protocol):
    @property
    def run_dir(self) -> Path: ...

    @property
    def state(self) -> RunState: ...

    @property
    def controls(self) -> ControlsView: ...

    @property
    def clock(self) -> ClockView: ...

    @property
    def jobs(self) -> JobsView: ...

    @property
    def tool_step(self) -> OutputFeed: ...

    @property
    def attempts(self) -> AttemptsView: ...

    @property
    def provider(self) -> ClosableProvider | None: ...

    @property
    def sandbox(self) -> FileSource | None: ...

    def subscribe(self, callback: Callable[[ev.Event], None]) -> None: ...

    async def run(self, make_agent: Callable[[Any], Agent]) -> RunResult: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def step(self) -> None: ...

    def approve(self, call_id: str) -> bool: ...

    def edit(self, call_id: str, arguments: dict[str, Any]) -> bool: ...

    def reject(self, call_id: str, message: str = "") -> bool: ...

    def inject(self, target: str, text: str) -> None: ...

    def set_breakpoints(self, breakpoints: list[Breakpoint]) -> None: ...

    def request_stop(self, *, evaluate: bool = True) -> None: ...

    def stop_job(self, job: str) -> bool: ...

    def stop_attempt(self, attempt: str) -> bool: ...

    def promote_attempt(self, attempt: str) -> bool: ...
