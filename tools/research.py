"""The research tools: literature and public code, fetched host-side into the workspace."""

from __future__ import annotations

from typing import Any

from mlra.tools.arxiv import ArxivRead, ArxivSearch
from mlra.tools.github import GithubClone
from mlra.tools.registry import Tool

RESEARCH_TOOL_NAMES = ("arxiv_search", "arxiv_read", "github_clone")


def research_tools() -> list[Tool[Any]]:
    """For the worker: search and read papers, clone repositories."""
    return [ArxivSearch(), ArxivRead(), GithubClone()]


def reading_tools() -> list[Tool[Any]]:
    """For the supervisor, who plans from the literature but leaves code to the worker."""
    return [ArxivSearch(), ArxivRead()]
