"""How an attempt's own run is made and run: the launcher a searching run's attempt
manager uses (agent/loop/attempts.py), set by `agent_for`.

Apart from the manager so that the manager, which the controller holds, imports
nothing of the controller: an attempt's run is a controller of its own.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from mlra import events as ev
from mlra.agent.agents.attempt_agent import attempt_agent
from mlra.agent.loop.attempt_time import raise_time_limit
from mlra.agent.loop.attempts import AttemptManager
from mlra.agent.providers.base import ModelProvider
from mlra.agent.run.attempt_copies import (
    clear_if_never_started,
    copy_parents_workspace,
    note_inherited,
)
from mlra.agent.run.controller import RunController
from mlra.agent.run.resume import ResumeError, load_run, resume_controller
from mlra.agent.setup.config import AttemptSettings, RunConfig
from mlra.tasks.spec import TaskSpec
from mlra.tools.sandbox.backends import sandbox_backend


async def run_attempt(
    parent: RunController,
    manager: AttemptManager,
    started: ev.AttemptStarted,
    run_dir: Path,
    resume: bool,
) -> None:
    """Make (or take up) the attempt's run and run it to its end."""
    child, skipped = await asyncio.to_thread(_child, parent, started, run_dir, resume)
    if child is None:
        return  # it had ended; only its attempt_finished was not written
    if skipped:
        parent.append(ev.Notice(level="warning", message=f"attempt {started.attempt}: {skipped}"))
    manager.children[started.attempt] = child
    child.closing_left = parent.clock.remaining  # its closing validation at its limit
    manager.sync_limit(started.attempt)  # raised while its run was being made
    if child.config.start_paused != parent.controls.stepping:
        # The run paused while the attempt's run was being made (a step's pause right
        # after the attempt_start it let through): the pause did not reach it, since it
        # was not a child yet, and it ran on while the run stood still. Or it resumed
        # then (made while stepped or a step's pause was pending): the resume did not
        # reach it either, and it started paused while the run ran, and stayed so.
        child.config = child.config.model_copy(update={"start_paused": parent.controls.stepping})
    if parent.notifications is not None:  # its waits for the model server are told
        child.subscribe(parent.notifications.attempt_events(started.attempt))
    # A stepped action of its is the search's time: the search's clock runs until it is
    # done (agent/control/steering.py), told when it pauses again or its run ends.
    child.on_paused = lambda: parent.attempt_step_done(started.attempt)
    try:
        await child.run(attempt_agent)
    finally:
        parent.attempt_step_done(started.attempt)


def attempt_task(task: TaskSpec) -> TaskSpec:
    """The task as an attempt runs it: its best validated copy is always kept, since it is
    what the search submits."""
    validation = task.validation.model_copy(update={"grade_best_at_deadline": True})
    return task.model_copy(update={"validation": validation})


def _child(
    parent: RunController, started: ev.AttemptStarted, run_dir: Path, resume: bool
) -> tuple[RunController | None, str]:
    """The attempt's own run, made (or, resuming, reopened) in its folder, and what its
    copy of the parent's workspace left out (in words, '' for nothing)."""
    if resume:
        if clear_if_never_started(run_dir):  # mlra stopped while its workspace was made
            raise RuntimeError("it had not started when mlra stopped, and was not resumed")
        recorded = load_run(run_dir)
        if any(isinstance(e, ev.RunFinished) for e in recorded.events):
            return None, ""
        provider = parent.provider.for_attempt(started.attempt) if parent.provider else None
        try:
            resumed = resume_controller(
                recorded,
                attempt_task(parent.task),
                provider,
                overrides={"time_limit_s": _recorded_limit(provider) or _limit(parent, started)},
            )
        except ResumeError as exc:
            raise RuntimeError(str(exc)) from None
        resumed.run_group = parent.run_group  # its sandbox's group made under the run's
        _raise_as_recorded(resumed, provider)
        return resumed, ""
    provider = parent.provider.for_attempt(started.attempt) if parent.provider else None
    config = parent.config.model_copy(
        update={
            "run_id": started.attempt,
            "runs_dir": run_dir.parent,
            "time_limit_s": _recorded_limit(provider) or _limit(parent, started),
            "search": "none",
            # Started while the run is paused or stepped (the step that started it is
            # the search's action, not the attempt's): paused with it.
            "start_paused": parent.controls.stepping,
            "breakpoints": [],
            "max_cost_usd": _left(parent.config.max_cost_usd, parent.state.cost_usd),
            "max_tokens": None,
            "max_steps": None,
            # The search's attempts share its log budget (each an `attempts`th), so a
            # search's logs stay within twice the budget together (agent/record/log_budget.py).
            "log_budget_mb": parent.config.log_budget_mb / parent.config.attempts,
            **_shared_out(parent.config, started.share),
            **_gpus_for(parent, _gpus_in_use(parent)),
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
        provider,
        sandbox_factory=parent.sandbox_factory,
    )
    child.run_group = parent.run_group  # its sandbox's group is made under the run's
    _raise_as_recorded(child, provider)
    child.prepare()
    skipped = ""
    if started.parent is not None:
        # Its workspace as the parent attempt's ended (that one no longer changes).
        source = run_dir.parent / started.parent / "workspace"
        skipped = copy_parents_workspace(child, source, started.parent)
    node = parent.attempts.tree.get(started.parent) if started.parent else None
    finished = node.finished if node is not None else None
    note_inherited(child, started.parent, finished.sha256 if finished is not None else None)
    return child, skipped


def _recorded_limit(provider: ModelProvider | None) -> float | None:
    """A replay's attempt runs under the limit it was recorded with, begun or resumed:
    its prompts state it. (None where the model is no replay.)"""
    return provider.recorded_time_limit() if provider is not None else None


def _raise_as_recorded(child: RunController, provider: ModelProvider | None) -> None:
    """A replay's attempt raised in its recording runs to that, begun or resumed, whatever
    this replay's raises, its prompts stating the limit it began with
    (agent/loop/attempt_time.py)."""
    deadline = provider.recorded_deadline() if provider is not None else None
    if deadline is not None:
        raise_time_limit(child, deadline, why="as its recording was", stated=False)


def _limit(parent: RunController, started: ev.AttemptStarted) -> float:
    """Its time limit as the search's tree has it: a later attempt's start may raise it."""
    node = parent.attempts.tree.get(started.attempt)
    return node.time_limit_s if node is not None else started.time_limit_s


def _shared_out(config: RunConfig, share: ev.Budget | None) -> dict[str, Any]:
    """The attempt's share of the run's budget (agent/setup/run_budget.py), its sandbox's
    limits; a log from before budgets: the memory and CPUs the user gave the run,
    shared out between the attempts that run at once."""
    if share is not None:
        return {"budget": share}
    k = config.attempts_parallel
    shared: dict[str, Any] = {}
    if k > 1 and config.memory_mb:
        shared["memory_mb"] = max(1, config.memory_mb // k)
    if k > 1 and config.cpus:
        shared["cpus"] = config.cpus / k
    return shared


def _gpus_in_use(parent: RunController) -> list[str]:
    return [
        child.config.gpus
        for child in parent.attempts.children.values()
        if isinstance(child, RunController) and child.config.gpus
    ]


def _gpus_for(parent: RunController, in_use: list[str]) -> dict[str, Any]:
    """The GPUs a new attempt gets when several run at once: the run's GPUs (`--gpus`
    ids, else those the host's CUDA_VISIBLE_DEVICES names, else every one NVML sees) split between the K attempts, the first share no
    running attempt holds. Fewer GPUs than attempts: they share them (by default one
    attempt runs at a time, so one GPU is never shared). A task needing no GPU: none."""
    config = parent.config
    k = config.attempts_parallel
    if k <= 1 or parent.task.resources.gpus <= 0 or (config.gpus or "").lower() == "none":
        return {}
    if config.gpus and config.gpus.lower() != "all":
        ids = [g.strip() for g in config.gpus.split(",") if g.strip()]
    else:
        from mlra.tools.sandbox.gpu_inventory import usable_gpus

        ids = [g.id for g in usable_gpus(config.gpus)]
    share = gpu_share(ids, k, in_use)
    if share is None:
        return {}
    settings: dict[str, Any] = {"gpus": share}
    told = sandbox_backend(config.sandbox).device_env(share)  # local: CUDA is told which
    if told:
        settings["env"] = {**config.env, **told}
    return settings


def gpu_share(ids: list[str], k: int, in_use: list[str]) -> str | None:
    """The GPU ids (comma-joined) of the first of K shares of `ids` no running attempt
    holds; with fewer GPUs than K, shares overlap (one GPU each, round robin). None: no
    GPU to share."""
    if not ids:
        return None
    per = max(1, len(ids) // k)
    shares = [",".join(ids[(i * per) % len(ids) : (i * per) % len(ids) + per]) for i in range(k)]
    for share in shares:
        if share not in in_use:
            return share
    return shares[len(in_use) % k]


def _left(limit: float | None, used: float) -> float | None:
    return None if limit is None else max(0.0, limit - used)
