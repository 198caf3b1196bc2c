"""A research tool added as docs/contributing.md says: its own class and one line of
tools/research_table.py, and every part that knows the research tools knows it (the
`--tools` flag, a run's and a batch's config, the agents' tools and prompts); a name
the table does not have is one line, as before the table."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import BaseModel, Field, ValidationError

from mlra.agent.agents.supervisor import supervisor_history
from mlra.agent.agents.worker import worker_history
from mlra.agent.setup.config import RunConfig
from mlra.batch.spec import BatchSpec
from mlra.console.cli.fetch_args import add_fetch_args, fetch_settings
from mlra.tasks.spec import load_task
from mlra.tools.fetch.policy import FetchPolicy
from mlra.tools.registry import Tool, ToolContext, ToolOutcome, ToolRegistry
from mlra.tools.research import reading_tools, research_tools
from mlra.tools.research_table import RESEARCH_TOOLS, ResearchTool
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox


class PaperNoteArgs(BaseModel):
    url: str = Field(description="the paper's address")
    text: str = Field(description="what to keep of it")


class PaperNote(Tool[PaperNoteArgs]):
    """The recipe's example: a tool that keeps a note on a paper under papers/, for
    an address the user's allow-list lets the research tools fetch from."""

    name = "paper_note"
    description = "Keep a note on a paper (by its address) under papers/."
    Args = PaperNoteArgs

    def __init__(self, *, policy: FetchPolicy) -> None:
        self.policy = policy

    async def run(self, args: PaperNoteArgs, ctx: ToolContext) -> ToolOutcome:
        target = self.policy.check(args.url, what="the paper's address")
        where = await ctx.sandbox.write_file("papers/note.txt", args.text.encode())
        return ToolOutcome(output=f"noted {target.host_port} in {where}")


LINE = ResearchTool(
    tools=(f"{__name__}:PaperNote",),
    says="`paper_note` keeps a note on a paper under papers/",
    reading="`paper_note` to keep notes while planning",
)


@pytest.fixture
def with_notes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one table line the recipe adds."""
    monkeypatch.setitem(RESEARCH_TOOLS, "notes", LINE)


def _flags(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mlra run", exit_on_error=False)
    add_fetch_args(parser)
    return parser.parse_args(list(argv))


@pytest.fixture
async def box(tmp_path: Path) -> AsyncIterator[LocalSandbox]:
    ws = (tmp_path / "run" / "workspace").resolve()
    ws.mkdir(parents=True)
    sandbox = LocalSandbox(ws, SandboxSpec(), isolation_mode="none")
    await sandbox.start()
    yield sandbox
    await sandbox.close()


@pytest.mark.usefixtures("with_notes")
async def test_a_research_tool_added_by_one_line_is_named_given_and_used(
    answer_task: Path, box: LocalSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLRA_CONFIG", str(tmp_path / "no-config.toml"))
    flags = _flags("--tools", "notes,arxiv", "--allow-host", "papers.example.org")
    assert flags.tools == ["arxiv", "notes"]
    config = RunConfig(
        task="answer",
        model="openai/test",
        research_tools=flags.tools,
        fetch=fetch_settings(flags.allow_hosts),
    )
    resumed = RunConfig.model_validate_json(config.model_dump_json())  # config.json, read back
    assert resumed.research_tools == ["arxiv", "notes"]
    assert BatchSpec(tasks=["answer"], models=["openai/test"], tools=["notes"]).tools == ["notes"]

    worker = [t.name for t in research_tools(config.research_tools, config.fetch)]
    assert worker == ["arxiv_search", "arxiv_read", "paper_note"]
    supervisor = [t.name for t in reading_tools(config.research_tools, config.fetch)]
    assert supervisor == ["arxiv_search", "arxiv_read", "paper_note"]
    task = load_task(answer_task)
    told = worker_history(config, task, "/workspace", 300).system
    assert "`paper_note` keeps a note on a paper under papers/; they work" in told
    planned = supervisor_history(config, task, "/workspace", 300).system
    assert "`paper_note` to keep notes while planning" in planned

    registry = ToolRegistry(research_tools(config.research_tools, config.fetch))
    ctx = ToolContext(sandbox=box, agent="worker", call_id="c1")
    kept = await registry.dispatch(
        "paper_note", {"url": "https://papers.example.org/1", "text": "attention"}, ctx
    )
    assert kept.ok, kept.output
    assert (box.workspace / "papers" / "note.txt").read_text() == "attention"
    refused = await registry.dispatch(
        "paper_note", {"url": "https://elsewhere.example.com/1", "text": "x"}, ctx
    )
    assert not refused.ok and "elsewhere.example.com" in refused.output


@pytest.mark.usefixtures("with_notes")
def test_the_tools_flag_lists_the_tables_names() -> None:
    parser = argparse.ArgumentParser(prog="mlra run")
    add_fetch_args(parser)
    help_text = " ".join(parser.format_help().split())
    assert "has: github, arxiv, notes, several (github,arxiv,notes: the default)" in help_text
    assert RunConfig(task="answer", model="openai/test").research_tools == [
        "github",
        "arxiv",
        "notes",
    ]


def test_a_research_tool_the_table_lacks_is_one_line() -> None:
    with pytest.raises(argparse.ArgumentError) as flag:
        _flags("--tools", "gitlab")
    assert str(flag.value) == (
        "argument --tools: 'gitlab': name research tools from github, arxiv, or none"
    )
    with pytest.raises(ValidationError) as config:
        RunConfig(task="answer", model="openai/test", research_tools=["gitlab"])
    (error,) = config.value.errors()
    assert error["msg"] == "Input should be 'github' or 'arxiv'"
    with pytest.raises(ValidationError) as batch:
        BatchSpec(tasks=["answer"], models=["openai/test"], tools=["gitlab"])
    assert [e["msg"] for e in batch.value.errors()] == ["Input should be 'github' or 'arxiv'"]
