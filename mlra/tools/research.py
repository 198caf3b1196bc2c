"""The research tools: literature and public code, fetched for the agent into the workspace.

Which of them a run has is the user's choice (`--tools`: a task may forbid outside
code), and what they may fetch is the user's allow-list (tools/fetch/policy.py), both
recorded in the run's config.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from mlra.tools.arxiv import ArxivSearch
from mlra.tools.arxiv_read import ArxivRead
from mlra.tools.fetch.policy import FetchPolicy, FetchSettings
from mlra.tools.github import GithubClone
from mlra.tools.registry import Tool

ResearchTool = Literal["github", "arxiv"]
RESEARCH_TOOLS: tuple[ResearchTool, ...] = ("github", "arxiv")
RESEARCH_TOOL_NAMES = ("arxiv_search", "arxiv_read", "github_clone")


def research_tools(
    enabled: Sequence[str] = RESEARCH_TOOLS, fetch: FetchSettings | None = None
) -> list[Tool[Any]]:
    """For the worker: search and read papers, clone repositories."""
    policy = FetchPolicy(fetch)
    tools: list[Tool[Any]] = []
    if "arxiv" in enabled:
        tools += [ArxivSearch(policy=policy), ArxivRead(policy=policy)]
    if "github" in enabled:
        tools.append(GithubClone(policy=policy))
    return tools


def reading_tools(
    enabled: Sequence[str] = RESEARCH_TOOLS, fetch: FetchSettings | None = None
) -> list[Tool[Any]]:
    """For the supervisor, who plans from the literature but leaves code to the worker."""
    if "arxiv" not in enabled:
        return []
    policy = FetchPolicy(fetch)
    return [ArxivSearch(policy=policy), ArxivRead(policy=policy)]
