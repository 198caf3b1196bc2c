"""How an attempt's own run is made and run: the launcher a searching run's attempt
manager uses (agent/attempts.py), set by `agent_for`.

Apart from the manager so that the manager, which the controller holds, imports
nothing of the controller: an attempt's run is a controller of its own.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

from mlra import events as ev
from mlra.agent.attempt_agent import attempt_agent
from mlra.agent.attempts import AttemptManager
from mlra.agent.config import AttemptSettings, RunConfig
from mlra.agent.controller import RunController
from mlra.agent.eventlog import EVENTS_FILE
from mlra.agent.resume import ResumeError, load_run, resume_controller
from mlra.tasks.spec import TaskSpec


async def run_attempt(
    parent: RunController,
    manager: AttemptManager,
    started: ev.AttemptStarted,
    run_dir: Path,
    resume: bool,
) -> None:
    """Make (or take up) the attempt's run and run it to its end."""
    child = await asyncio.to_thread(_child, parent, started, run_dir, resume)
    if child is None:
        return  # it had ended; only its attempt_finished was not written
    manager.children[started.attempt] = child
    await child.run(attempt_agent)


def attempt_task(task: TaskSpec) -> TaskSpec:
    """The task as an attempt runs it: its best validated copy is always kept, since it is
    what the search submits."""
    validation = task.validation.model_copy(update={"grade_best_at_deadline": True})
    return task.model_copy(update={"validation": validation})


def _child(
    parent: RunController, started: ev.AttemptStarted, run_dir: Path, resume: bool
) -> RunController | None:
    """The attempt's own run, made (or, resuming, reopened) in its folder."""
    if resume:
        if not (run_dir / EVENTS_FILE).is_file():
            raise RuntimeError("it had not started when mlra stopped, and was not resumed")
        recorded = load_run(run_dir)
        if any(isinstance(e, ev.RunFinished) for e in recorded.events):
            return None
        try:
            return resume_controller(
                recorded,
                attempt_task(parent.task),
                parent.provider,
                overrides={"time_limit_s": started.time_limit_s},
            )
        except ResumeError as exc:
            raise RuntimeError(str(exc)) from None
    config = parent.config.model_copy(
        update={
            "run_id": started.attempt,
            "runs_dir": run_dir.parent,
            "time_limit_s": started.time_limit_s,
            "search": "none",
            "start_paused": False,
            "breakpoints": [],
            "max_cost_usd": _left(parent.config.max_cost_usd, parent.state.cost_usd),
            "max_tokens": None,
            "max_steps": None,
            **_shared_out(parent.config),
            "attempt": AttemptSettings(
                id=started.attempt,
                parent=started.parent,
                operator=started.operator,
                instructions=started.instructions,
                variant=started.variant,
            ),
        }
    )
    child = RunController(
        config,
        attempt_task(parent.task),
        parent.provider,
        sandbox_factory=parent.sandbox_factory,
    )
    child.prepare()
    if started.parent is not None:
        # Its workspace as the parent attempt's ended (that one no longer changes).
        source = run_dir.parent / started.parent / "workspace"
        shutil.rmtree(child.workspace)
        shutil.copytree(source, child.workspace, symlinks=True)
    return child


def _shared_out(config: RunConfig) -> dict[str, Any]:
    """The memory and CPUs the user gave the run, shared out between the attempts that
    run at once (a limit left to the default is each attempt's default)."""
    k = config.attempts_parallel
    shared: dict[str, Any] = {}
    if k > 1 and config.memory_mb:
        shared["memory_mb"] = max(1, config.memory_mb // k)
    if k > 1 and config.cpus:
        shared["cpus"] = config.cpus / k
    return shared


def _left(limit: float | None, used: float) -> float | None:
    return None if limit is None else max(0.0, limit - used)
