"""What the parts of a run (the model turn, the tool step) need from the run.

A protocol rather than the controller's class: the controller is built from
these parts, and a part that imported it back would close an import cycle.
The run's clock is read through it at each use, since resuming replaces it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from mlra import events as ev
from mlra.agent.loop.catchup import CatchUp
from mlra.agent.loop.clock import RunClock
from mlra.agent.loop.controls import Controls
from mlra.agent.loop.unlogged import UnloggedFeed
from mlra.agent.providers.base import ModelProvider
from mlra.agent.record.log_budget import LogBudget
from mlra.agent.record.state import RunState
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import TaskSpec
from mlra.tools.sandbox.base import Sandbox


class RunContext(Protocol):
    config: RunConfig
    task: TaskSpec
    provider: ModelProvider | None
    run_id: str
    run_dir: Path
    workspace: Path
    clock: RunClock
    controls: Controls
    state: RunState
    sandbox: Sandbox | None
    catchup: CatchUp
    log_budget: LogBudget
    unlogged: UnloggedFeed
    """What the log no longer takes, for the live console alone (agent/loop/unlogged.py)."""

    def emit(self, event: ev.Event) -> ev.Event:
        """Record an agent's action (matched against the recording while catching up)."""
        ...

    def append(self, event: ev.Event) -> ev.Event:
        """Record what the run itself observes, past any catch-up (notices)."""
        ...

    def pause(self, *, source: str = "user") -> None: ...

    async def pause_at_boundary(self) -> None:
        """Pause at a step boundary where a step's action is used up (a search's, once
        its attempts' actions in hand end: agent/control/steering.py)."""
        ...

    def settle(self) -> None:
        """A search asked to pause after the actions in hand pauses if none moves."""
        ...

    def check_budget(self) -> None:
        """Raise EndRun when a budget is used up."""
        ...

    async def begin_step(self, agent: ev.AgentRole, *, counts: bool) -> int:
        """Wait at the gate (pause, step mode), check budgets, and number the step."""
        ...

    def elapsed_note(self) -> str: ...
