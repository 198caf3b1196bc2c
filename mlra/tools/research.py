"""The research tools: literature and public code, fetched for the agent into the workspace.

Which of them a run has is the user's choice (`--tools`: a task may forbid outside
code), and what they may fetch is the user's allow-list (tools/fetch/policy.py), both
recorded in the run's config. Which tools each name gives is tools/research_table.py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from mlra.lazy_load import load
from mlra.tools.fetch.policy import FetchPolicy, FetchSettings
from mlra.tools.registry import Tool
from mlra.tools.research_table import RESEARCH_TOOLS, in_order

for _entry in RESEARCH_TOOLS.values():
    # Every line's classes imported with this module, as the agents that build them
    # are: a tool that cannot be imported fails the start, not a run's first turn.
    for _target in _entry.tools:
        load(_target)


def _made(names: Sequence[str], policy: FetchPolicy) -> list[Tool[Any]]:
    return [
        cast(Any, load(target))(policy=policy)
        for name in names
        for target in RESEARCH_TOOLS[name].tools
    ]


def research_tools(
    enabled: Sequence[str] | None = None, fetch: FetchSettings | None = None
) -> list[Tool[Any]]:
    """For the worker: search and read papers, clone repositories."""
    return _made(in_order(_all(enabled), reading_first=True), FetchPolicy(fetch))


def reading_tools(
    enabled: Sequence[str] | None = None, fetch: FetchSettings | None = None
) -> list[Tool[Any]]:
    """For the supervisor, who plans from the literature but leaves code to the worker."""
    reading = [name for name in in_order(_all(enabled)) if RESEARCH_TOOLS[name].reading]
    return _made(reading, FetchPolicy(fetch)) if reading else []


def _all(enabled: Sequence[str] | None) -> Sequence[str]:
    return tuple(RESEARCH_TOOLS) if enabled is None else enabled
