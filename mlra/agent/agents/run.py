"""Putting a run together: which agent drives it."""

from __future__ import annotations

from functools import partial

from mlra.agent.run.controller import Agent, RunController


def know_tools(controller: RunController) -> None:
    """Tell the run's controls which tools its agents will have (agent/agents/tool_lists.py),
    so a breakpoint naming none of them is refused: before the run starts where its
    driver can (its control endpoint answers from then on), else as its agent is made."""
    from mlra.agent.agents.tool_lists import run_tool_names

    if controller.controls.tools is None:
        controller.controls.tools = run_tool_names(
            controller.config, model=controller.provider is not None
        )


def agent_for(controller: RunController) -> Agent:
    """The baseline agent when there is no model, else the supervisor–worker pair, or the
    worker alone for `--agent worker` (agent/agents/worker_alone.py); the
    greedy search policy over attempts (agent/agents/search.py) for `--search greedy`. A run
    that searches gets the launcher its attempts' own runs are made by."""
    know_tools(controller)
    if controller.config.search != "none":
        from mlra.agent.agents.attempt_runs import run_attempt

        controller.attempts.launcher = partial(run_attempt, controller)
    if controller.config.search == "greedy":
        from mlra.agent.agents.search import GreedySearch

        return GreedySearch(controller)
    if controller.provider is None:
        from mlra.agent.agents.baseline import BaselineAgent

        return BaselineAgent(controller)
    from mlra.agent.agents.window_floor import run_floor

    controller.turns.window.floor = partial(run_floor, controller.config, controller.task)
    if controller.config.agent == "worker":
        from mlra.agent.agents.worker_alone import WorkerAloneAgent

        return WorkerAloneAgent(controller)
    from mlra.agent.agents.supervisor import Supervisor

    return Supervisor(controller)
