"""Putting a run together: which agent drives it."""

from __future__ import annotations

from mlra.agent.controller import Agent, RunController


def agent_for(controller: RunController) -> Agent:
    """The baseline agent when there is no model, else the supervisor–worker pair."""
    if controller.provider is None:
        from mlra.agent.baseline import BaselineAgent

        return BaselineAgent(controller)
    from mlra.agent.supervisor import Supervisor

    return Supervisor(controller)
