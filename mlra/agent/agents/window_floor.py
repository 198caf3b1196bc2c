"""The smallest context window the agents can work in, and refusing a smaller one.

Before anything is summarized, each agent sends its system prompt, the task and its
tool definitions, and asks for an answer: that first request must fit the history's
share of the window (agent/loop/context_window.py `history_budget`), or every turn after
it is summarized down to nothing and the server still refuses. A smaller window is
refused before the run starts, in one line that says the smallest that works.

The first requests are measured from the agents' own prompts and tool lists
(agent/agents/worker.py `worker_tools`, agent/agents/supervisor.py `supervisor_tools`), as the
run builds them, so the floor follows whatever changes there (a tool added, a
schema made smaller); only what the run adds at each turn (the clock note, the
subtask's instructions) is an allowance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlra import events as ev
from mlra.agent.agents.supervisor import supervisor_history, supervisor_tools
from mlra.agent.agents.tool_lists import Unused, ignored, ignored_plan, unused_delegate
from mlra.agent.agents.worker import worker_history, worker_tools
from mlra.agent.loop.context_window import (
    PROMPT_TOKENS,
    WINDOW_MARGIN,
    history_budget,
    smallest_window,
    tools_tokens,
)
from mlra.agent.loop.history import AgentHistory
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import TaskSpec
from mlra.tools.jobs import JobManager
from mlra.tools.registry import Tool, ToolRegistry

INSTRUCTIONS_TOKENS = 300
"""Room for the worker's subtask instructions (written by the supervisor, so unknown
before the run): a few sentences."""


@dataclass(frozen=True)
class FirstRequest:
    agent: ev.AgentRole
    tokens: int
    """Its system prompt, the task, its tool definitions and the turn's prompt, estimated
    as the run estimates a request (agent/loop/history.py `estimate_tokens`)."""
    tools: int


def first_requests(config: RunConfig, task: TaskSpec) -> list[FirstRequest]:
    """Each agent's first request, measured from the prompts and tools the run will send."""
    workdir = str((config.runs_dir / f"{'0' * 15}-{task.name}-{'0' * 16}" / "workspace").resolve())
    time_limit_s = config.time_limit_for(task)
    jobs = JobManager(emit=ignored, clock=lambda: 0.0, records=dict)
    if config.agent == "worker":  # the worker alone: its own prompt and tools only
        alone = worker_tools(config, jobs=jobs, on_note=ignored, validator=Unused(), alone=True)
        history = worker_history(config, task, workdir, time_limit_s, alone=True)
        return [_first("worker", history, alone, INSTRUCTIONS_TOKENS)]
    worker = worker_tools(config, jobs=jobs, on_note=ignored, validator=Unused())
    supervisor = supervisor_tools(config, on_plan=ignored_plan, delegate=unused_delegate)
    return [
        _first(
            "supervisor", supervisor_history(config, task, workdir, time_limit_s), supervisor, 0
        ),
        _first(
            "worker",
            worker_history(config, task, workdir, time_limit_s),
            worker,
            INSTRUCTIONS_TOKENS,
        ),
    ]


def run_floor(config: RunConfig, task: TaskSpec) -> int:
    """The smallest window this run's agents work in, with the answers the run gives."""
    largest = max(first_requests(config, task), key=lambda r: r.tokens)
    return smallest_window(largest.tokens, config.context_fraction)


def window_problem(
    config: RunConfig, task: TaskSpec, window: int, output: int, output_set: int | None
) -> str | None:
    """Why `window` (answers of `output` tokens; `output_set`: what the user asked for, if
    anything) is too small for the agents' own first requests, in one line with the
    smallest window that works; None where it is not."""
    budget = history_budget(window, output, config.context_fraction)
    largest = max(first_requests(config, task), key=lambda r: r.tokens)
    if largest.tokens <= budget:
        return None
    least = smallest_window(largest.tokens, config.context_fraction, output_set)
    source = {
        "setting": f"--context-window {window}",
        "server": f"the server's context window ({window:,} tokens)",
    }.get(config.context_window_from or "", f"the model's context window ({window:,} tokens)")
    return (
        f"{source} is too small for the {largest.agent}'s own first request: its prompt, "
        f"the task and its {largest.tools} tool definitions take about {largest.tokens:,} "
        f"tokens; with room for an answer and a {WINDOW_MARGIN:.0%} margin the smallest "
        f"window that works is {least:,} tokens"
        + (
            " (start the server with a larger context: llama.cpp --ctx-size, Ollama num_ctx)"
            if config.context_window_from == "server"
            else ""
        )
    )


def _first(
    agent: ev.AgentRole, history: AgentHistory, tools: list[Tool[Any]], allowance: int
) -> FirstRequest:
    specs = ToolRegistry(tools).specs()
    # What `ContextWindow.keep` counts before the first turn: the history, the tools and
    # the prompt still to come.
    tokens = history.estimated_tokens(extra=tools_tokens(specs)) + PROMPT_TOKENS + 1 + allowance
    return FirstRequest(agent=agent, tokens=tokens, tools=len(specs))
