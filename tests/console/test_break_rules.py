"""A breakpoint that names a tool none of the run's agents has would never fire: it is
refused with the tools they have, on the command line (exit 2, before the run folder
is made) and in the console's breakpoints dialog (the dialog stays, saying why); a
glob (`job_*`) and `tool:pattern` are judged by their tool part. `mlra ctl`'s refusal is
in tests/console/test_ctl_cli.py, beside its other controls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import Static, TextArea

from mlra import events as ev
from mlra.agent.agents.tool_lists import run_tool_names
from mlra.agent.setup.config import RunConfig
from mlra.console.screens.screens import BreakpointsScreen
from tests.conftest import mlra_cli
from tests.console.test_console_controls import ANSWER, REPORT, is_, live, worker


def test_a_rule_naming_no_tool_is_refused_before_the_run(tmp_path: Path, answer_task: Path) -> None:
    runs = tmp_path / "runs"
    for rule, said in (
        ("bsah", "no tool of this run's agents is named 'bsah' (did you mean bash?)"),
        ("jb_*", "no tool of this run's agents matches 'jb_*'"),
        ("assign_subtask:x", "is named 'assign_subtask'"),  # the supervisor's: none here
        # Empty (an unset variable, `--break "$TOOL"`): not every call, unasked.
        ("", "an empty rule would break before every call: write '*' for that"),
        (":", "an empty rule would break before every call"),
    ):
        done = mlra_cli(
            [
                *("run", str(answer_task), "--model", "baseline", "--no-tui"),
                *("--runs-dir", str(runs), "--break", "bash", "--break", rule),
            ],
            cwd=tmp_path,
        )
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"mlra: --break {rule!r}: "), lines
        assert said in lines[0]
        assert rule in ("", ":") or "the baseline's tools: bash, python, read_file" in lines[0]
        assert not runs.exists() or not any(runs.iterdir())


def test_each_agents_tools_are_known_before_it_runs() -> None:
    def names(**settings: Any) -> dict[str, tuple[str, ...]]:
        return run_tool_names(RunConfig(task="answer", model="openai/m", **settings), model=True)

    pair = names()
    assert {"assign_subtask", "update_plan"} <= set(pair["supervisor"])
    assert {"bash", "job_start", "report"} <= set(pair["worker"])
    alone = names(agent="worker")
    assert list(alone) == ["worker"] and "report" not in alone["worker"]
    # A search's attempts stop at no breakpoint: only the search's own tools are named.
    assert list(names(search="llm")) == ["supervisor"]
    assert "attempt_start" in names(search="llm")["supervisor"]
    assert "bash" not in names(search="greedy")["supervisor"]


async def test_the_breakpoints_dialog_refuses_a_rule_naming_no_tool(
    tmp_path: Path, answer_task: Path
) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        assert isinstance(waiting, ev.ApprovalRequested)
        await run.shown(lambda app: app.state.pending_approval is not None)
        await run.pilot.press("b")
        await run.shown(lambda app: isinstance(app.screen, BreakpointsScreen))
        dialog = run.app.screen
        dialog.query_one(TextArea).text = "bash\nreprot"
        await run.pilot.press("ctrl+s")
        said = dialog.query_one("#break-error", Static)
        await run.shown(lambda app: "did you mean report?" in str(said.render()))
        assert "reprot: no tool of this run's agents is named 'reprot'" in str(said.render())
        assert isinstance(run.app.screen, BreakpointsScreen)  # it stays, to be corrected
        dialog.query_one(TextArea).text = "bash\njob_*:train"
        await run.pilot.press("ctrl+s")
        rules = await run.watch.wait(is_(ev.Control, action="breakpoints"))
        assert isinstance(rules, ev.Control)
        assert rules.arguments == {"rules": ["bash", "job_*:train"]}
        await run.shown(lambda app: not isinstance(app.screen, BreakpointsScreen))
        await run.pilot.press("a")
        await run.watch.wait(is_(ev.ToolResult, call_id=waiting.call_id))
        assert (await run.finished()).reason == "submitted"
    assert run.watch.count(is_(ev.Control, action="breakpoints")) == 1


async def test_a_rule_typed_in_the_breakpoints_dialog_is_added_to_those_set(
    tmp_path: Path, answer_task: Path
) -> None:
    """The cursor started before the set rules: `b`, then `read_file` typed, made one rule,
    `read_filebash`, refused as naming no tool."""
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        assert isinstance(waiting, ev.ApprovalRequested)
        await run.shown(lambda app: app.state.pending_approval is not None)
        await run.pilot.press("b")
        await run.shown(lambda app: isinstance(app.screen, BreakpointsScreen))
        dialog = run.app.screen
        said = dialog.query_one("#break-error", Static)
        await run.pilot.press(*"read_file", "ctrl+s")
        await run.shown(lambda app: app.screen is not dialog or "no tool" in str(said.render()))
        assert run.app.screen is not dialog, str(said.render())
        rules = await run.watch.wait(is_(ev.Control, action="breakpoints"))
        assert isinstance(rules, ev.Control)
        assert rules.arguments == {"rules": ["bash", "read_file"]}
        await run.shown(lambda app: not isinstance(app.screen, BreakpointsScreen))
        await run.pilot.press("a")
        await run.watch.wait(is_(ev.ToolResult, call_id=waiting.call_id))
        await run.finished()
