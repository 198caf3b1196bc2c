"""`mlra fork` of a run that searched, through the real command line: the attempts
running at the fork's step are recorded lost in the fork, and the person forking is
told which (their transcript otherwise said nothing of them but the wait's table)."""

from __future__ import annotations

from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.agent.test_search import _variant_task
from tests.conftest import mlra_cli


async def test_a_fork_says_which_attempts_it_lost(tmp_path: Path, answer_task: Path) -> None:
    task = load_task(_variant_task(answer_task, tmp_path))
    runs = tmp_path / "runs"
    cfg = RunConfig(
        task=task.name,
        model="baseline",
        runs_dir=runs,
        run_id="src",
        isolation="none",
        search="greedy",
        attempts=3,
    )
    await RunController(cfg, task, None).run(agent_for)
    events = read_events(runs / "src" / "events.jsonl")
    a2_call = next(e for e in events if isinstance(e, ev.AttemptStarted) and e.attempt == "a2")
    step = next(
        e.step for e in events if isinstance(e, ev.ToolCall) and e.call_id == a2_call.call_id
    )
    done = mlra_cli(
        ["fork", str(runs / "src"), "--at", str(step + 1), "--run-id", "fork", "--no-tui"],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"forked src at step {step + 1} into fork"
    assert lines[1] == (
        f"  attempt a2 was running at step {step + 1}: lost in the fork (what it did after "
        "belongs to src)"
    )
