"""The research tools, one line each: what `--tools` names, which tools it gives, and
how the agents' prompts name them.

Everything else reads this table: `--tools`' choices and help (console/cli/fetch_args.py),
what a run's and a batch's config accept (agent/setup/config.py, batch/spec.py), the
tools the worker and the supervisor get (tools/research.py) and the words of their
prompts (agent/setup/prompts.py). Adding a research tool is its own module and one
line here (docs/contributing.md). Plain data, importing nothing: `mlra --help` reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from mlra.lazy_load import one_of


class ResearchTool(NamedTuple):
    """One name of `--tools`: the tools it gives the agents, and their words for them."""

    tools: tuple[str, ...]
    """Each tool's class as "module:Class", made with `Class(policy=FetchPolicy)`
    (tools/fetch/policy.py: what the user allows it to fetch)."""
    says: str
    """The worker's prompt's words for them: "`name` does this", after "For research,"."""
    reading: str = ""
    """The supervisor's prompt's words, where it gets these tools too (it plans from the
    literature but leaves code to the worker): "`name` to do this while planning"."""


RESEARCH_TOOLS: dict[str, ResearchTool] = {
    "github": ResearchTool(
        tools=("mlra.tools.github:GithubClone",),
        says="`github_clone` clones a public repository under repos/",
    ),
    "arxiv": ResearchTool(
        tools=("mlra.tools.arxiv:ArxivSearch", "mlra.tools.arxiv_read:ArxivRead"),
        says="`arxiv_search` finds papers, `arxiv_read` reads one a few pages at a time "
        "(the PDF is saved under papers/)",
        reading="`arxiv_search` and `arxiv_read` to look up the literature while planning",
    ),
}
"""In the order a run's config lists them (all of them: the default)."""


def research_tool_name(value: object) -> str:
    """A pydantic validator (before): a name of the table, or pydantic's own refusal."""
    return one_of(value, tuple(RESEARCH_TOOLS))


def in_order(enabled: Sequence[str], *, reading_first: bool = False) -> list[str]:
    """The table's names among `enabled`, in the table's order; with `reading_first`,
    the literature before code, as the worker's prompt names them and gets them."""
    names = [name for name in RESEARCH_TOOLS if name in enabled]
    if reading_first:
        names.sort(key=lambda name: not RESEARCH_TOOLS[name].reading)
    return names
