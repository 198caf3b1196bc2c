"""Starting a run: its sandbox, and the events that record the start, in the order a
resumed run's catch-up expects them (agent/loop/catchup.py).

The controller (agent/run/controller.py) calls `start_run` once its log and its control
endpoint are open; what the run does once started is the controller's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Protocol

from mlra import events as ev
from mlra.agent.loop.root_outside import say_root_outside
from mlra.agent.loop.run_context import RunContext
from mlra.agent.loop.tool_step import ToolStep
from mlra.agent.setup.run_budget import (
    budgeted_spec,
    held_mb,
    roomy_volume,
    small_disk_notice,
)
from mlra.agent.setup.run_setup import sandbox_info, started_event, task_environment
from mlra.agent.setup.sandboxes import create_sandbox
from mlra.tools.sandbox.base import Sandbox, SandboxError, SandboxSpec
from mlra.tools.sandbox.run_group import RunGroup


class StartRefused(Exception):
    """The run's sandbox would not start (one line): a `--disk` the volume refused, the
    space taken by other runs' sandboxes since the command line checked it; isolation
    gone since the preflight. The run ends with status error and that line, as a
    broken task environment does, not with an internal error's traceback."""


class StartingRun(RunContext, Protocol):
    """What starting needs of the run (its controller, which imports this module)."""

    time_limit_s: float
    run_group: RunGroup | None
    tool_step: ToolStep

    @property
    def sandbox_factory(self) -> Callable[[Path, SandboxSpec], Sandbox] | None: ...


async def start_run(run: StartingRun, control_problem: str | None) -> None:
    """Start the sandbox, record the run's start and start the clock; `control_problem`
    (why the run has no control endpoint) is said once the start is recorded."""
    make = run.sandbox_factory or partial(
        create_sandbox, config=run.config, task=run.task, run_id=run.run_id
    )
    # Before the sandbox: its `python` is the task's own environment, where it has one.
    python_env, env_notice = await asyncio.to_thread(task_environment, run.task, run.config)
    spec, budget = budgeted_spec(run, python_env)
    told_disk = not run.catchup.replaying and run.config.attempt is None
    run.sandbox = make(run.workspace, spec)
    try:
        notices = await run.sandbox.start()
    except SandboxError as exc:
        raise StartRefused(f"the run's sandbox did not start: {exc}") from None
    group = run.run_group
    if group is not None and not group.held:
        # The engine made the container's group elsewhere (tools/sandbox/docker_run_group.py).
        budget = budget.model_copy(update={"held_by": group.via, "not_held": group.not_held})
        run.run_group = None
    if not run.catchup.replaying:
        run.emit(
            started_event(
                run.run_id,
                run.task,
                run.config,
                time_limit_s=run.time_limit_s,
                sandbox=sandbox_info(run.sandbox, run.workspace),
                provider=run.provider,
                budget=budget,
            )
        )
        if run.config.ungraded:
            run.append(
                ev.Notice(
                    level="warning",
                    message="run ungraded (--ungraded): this machine cannot grade "
                    f"{run.task.name}: {run.config.ungraded}; any score it gets is "
                    "not the task's grading",
                )
            )
        for told in run.config.task_notices:
            run.append(ev.Notice(level="warning", message=told))
    if told_disk:
        # A searching run's own sandbox takes a share; its budget is what the run has.
        quota, own = budget.disk_mb, run.sandbox.limits.disk_mb
        if quota is not None and own is not None and run.config.search == "none":
            quota = min(quota, own)  # its volume took less: others took space meanwhile
        # The starter's files are walked only where a notice could be due (its volume
        # has under a GiB free, or there is no volume), off the event loop.
        if budget.disk_from_default and quota is not None and not roomy_volume(run.workspace):
            starter_mb = await asyncio.to_thread(held_mb, [run.workspace], "live")
            if (small := small_disk_notice(budget, quota, starter_mb)) is not None:
                run.append(ev.Notice(level="warning", message=small))
    if env_notice is not None:
        run.append(env_notice)
    for notice in notices:
        run.append(ev.Notice(level="warning", message=notice))
    root_outside = run.sandbox.root_outside_words("the agent's sandbox")
    if root_outside is not None:
        say_root_outside(run, root_outside)
    if control_problem is not None:
        run.append(ev.Notice(level="warning", message=control_problem))
    if not run.controls.paused:
        # An attempt its search paused while its run was being made (agent/agents/
        # attempt_runs.py) is paused already: its clock started here ran at its gate,
        # the pause below a no-op, its time limit counting while nothing moved.
        run.clock.start()
    if not run.catchup.replaying:
        run.catchup.go_live()
        await run.tool_step.snapshot(0)
    if run.config.start_paused:
        run.catchup.when_live(lambda: run.pause(source="start"))  # past any catch-up
