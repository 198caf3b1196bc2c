"""A measured baseline is the unchanged starter run as its recipe runs it, start to
submit: every later run's success is judged against it. A baseline run whose step the
user edited (at a breakpoint, or a fork's `--edit-action`) or that the user stopped
before its recipe's submit records nothing, and says why; the folder's baseline stays
what the runs that did measure it made it.

Folders in MLAgentBench's layout written for the test (tests/tasks/test_true_baselines.py):
the benchmark publishes no baseline, so baseline runs measure one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.cli.cli import main as mlra_main
from mlra.tasks.foreign.common import BASELINE_FILE, CACHE_VAR
from mlra.tasks.foreign.prepare import prepared
from mlra.tasks.spec import load_task
from tests.console.test_console_controls import Watch, is_
from tests.tasks.test_true_baselines import baseline_run, folder, notices

WRITES_FOUR = 'open("submission.csv", "w").write("4.0\\n")\n'


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_VAR, str(tmp_path / "cache"))


def _said(events: list[ev.Event]) -> str:
    said = [n for n in notices(events) if n.startswith(("no baseline", "the baseline of"))]
    assert len(said) == 1, said
    return said[0]


def test_a_fork_that_edits_a_recipe_step_records_no_baseline(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    source = folder(tmp_path, "four", WRITES_FOUR)
    _, first = baseline_run(source, runs, "--isolation", "none", "--run-id", "src")
    assert _said(first).startswith("the baseline of mlagentbench-four is now 4")

    edit = '{"command": "echo 0.5 > submission.csv"}'
    fork = ["fork", str(runs / "src"), "--at", "1", "--edit-action", edit, "--no-tui"]
    assert mlra_main([*fork, "--runs-dir", str(runs), "--run-id", "f1"]) == 0
    forked = read_events(runs / "f1" / "events.jsonl")
    graded = next(e for e in forked if isinstance(e, ev.EvaluationFinished))
    assert graded.score == 0.5  # graded as any run is: only the baseline is left alone
    assert _said(forked) == (
        "no baseline recorded for mlagentbench-four: this run is a fork of src@1, its "
        "workspace restored from that run's record, so it did not measure the starter as "
        "a baseline run sets it up"
    )
    assert load_task(source).metric.baseline == 4.0  # not (4 + 0.5) / 2


async def _held_run(
    tmp_path: Path, starter: str
) -> tuple[RunController, Watch, asyncio.Task[None], ev.ApprovalRequested]:
    source = folder(tmp_path, "held", starter)
    (source / "env" / "submission.csv").write_text("3.0\n")  # what a stop would grade
    task = prepared(load_task(source), echo=lambda _: None)  # as `mlra run` prepares it
    config = RunConfig(
        task=task.name,
        model="baseline",
        runs_dir=tmp_path / "runs",
        isolation="none",
        breakpoints=["bash"],
    )
    controller = RunController(config, task, None)
    watch = Watch(controller)
    running = asyncio.create_task(controller.run(agent_for))
    held = await watch.wait(is_(ev.ApprovalRequested), timeout=60)
    assert isinstance(held, ev.ApprovalRequested)
    return controller, watch, running, held


async def test_a_recipe_step_edited_at_a_breakpoint_records_no_baseline(tmp_path: Path) -> None:
    controller, watch, running, held = await _held_run(tmp_path, WRITES_FOUR)
    assert controller.edit(held.call_id, {"command": "echo 0.5 > submission.csv"})
    await running
    graded = next(e for e in watch.events if isinstance(e, ev.EvaluationFinished))
    assert graded.score == 0.5
    assert "the user edited a recipe step" in _said(watch.events)
    assert not (controller.task.root / BASELINE_FILE).exists()


async def test_a_baseline_stopped_before_its_recipe_ended_records_no_baseline(
    tmp_path: Path,
) -> None:
    """Stopped at the breakpoint before its one step ran: the workspace is graded as a stop
    grades it (the starter's own 3.0), and that is not a measurement of the recipe."""
    controller, watch, running, _ = await _held_run(tmp_path, WRITES_FOUR)
    controller.request_stop()
    await running
    graded = next(e for e in watch.events if isinstance(e, ev.EvaluationFinished))
    assert graded.score == 3.0
    assert _said(watch.events) == (
        "no baseline recorded for mlagentbench-held: the run ended before its recipe did: "
        "stopped by the user; the starter was not measured"
    )
    assert not (controller.task.root / BASELINE_FILE).exists()


async def test_a_rejected_recipe_step_says_the_user_rejected_it(tmp_path: Path) -> None:
    """Not "the recipe failed": nothing failed, the user said no."""
    controller, watch, running, held = await _held_run(tmp_path, WRITES_FOUR)
    assert controller.reject(held.call_id, "not now")
    await running
    said = _said(watch.events)
    assert "the user rejected a recipe step" in said and "failed" not in said, said
    assert not (controller.task.root / BASELINE_FILE).exists()


async def test_an_edit_saved_unchanged_still_measures_the_baseline(tmp_path: Path) -> None:
    """The console's edit dialog saved as it opened: the step ran as the recipe has it."""
    controller, watch, running, held = await _held_run(tmp_path, WRITES_FOUR)
    assert held.arguments is not None
    assert controller.edit(held.call_id, dict(held.arguments))
    await running
    assert _said(watch.events).startswith("the baseline of mlagentbench-held is now 4")
