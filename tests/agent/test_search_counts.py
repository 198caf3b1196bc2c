"""A search's attempts add up wherever they are counted: result.json's `attempts` counts
the stopped and the lost beside the validated, buggy and out of time (its `tried` was
more than their sum), and every line that sums the search up (the headless run's last
line, `mlra runs`, the replay's verdict, `mlra compare`, batch reports) says the same
counts in the same words, zeros left out.

The search is real: the baseline's greedy search of the answer task's recipe variants,
no training. In `src`, a1 is validated and the person promotes it while a2 sleeps (a2
stopped by the run's end); `fork`, forked at the step after a2's start, records a2
lost, starts a3, which the person stops, and submits a1."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from textual.widgets import Static

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.run_result import RunResult
from mlra.agent.run.controller import RunController
from mlra.agent.run.resume import fork_run, load_run, resume_controller
from mlra.batch.compare import matrix
from mlra.batch.compare.runs import load_all
from mlra.batch.report import write_report
from mlra.console.apps.headless_run import final_line
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.text.replay import ReplayModel
from tests.agent.test_search import greedy_search, sleeping_variant_task
from tests.console.test_replay import settle
from tests.console.test_search_reports import Try, listing, search_run

COUNTS = "3 tried (1 validated, 1 stopped, 1 lost)"
"""The fork's attempts, as every line says them."""
SOURCE_COUNTS = "2 tried (1 validated, 1 stopped)"
"""The run forked from: its a2 was stopped by the run's end, not lost."""


async def _sleeping(run_dir: Path, attempt: str) -> None:
    """Until the attempt's recipe is inside its `sleep` (its log says the command began)."""
    log = run_dir / "attempts" / attempt / "events.jsonl"
    async with asyncio.timeout(120):
        while not (log.is_file() and b"sleep 300" in log.read_bytes()):  # noqa: ASYNC110
            await asyncio.sleep(0.02)  # another run's log: nothing to await


async def _run(controller: RunController, attempt: str, act: str) -> RunResult:
    """The run to its end, the person acting on it (`act`: "promote" a1, "stop" the
    attempt) once `attempt` sleeps."""

    async def then() -> None:
        await _sleeping(controller.run_dir, attempt)
        if act == "promote":
            assert controller.promote_attempt("a1")
        else:
            assert controller.stop_attempt(attempt)

    side = asyncio.ensure_future(then())
    result = await controller.run(agent_for)
    await side
    return result


async def _search_with_a_stopped_and_a_lost_attempt(
    tmp_path: Path, answer_task: Path
) -> tuple[Path, str]:
    """The runs folder (`src` and `fork`) and the fork's last line as a headless run
    prints it."""
    task = sleeping_variant_task(
        answer_task,
        tmp_path,
        '{ n = "42", s = "0" }',
        '[{}, { s = "300" }, { n = "24", s = "300" }]',
    )
    await _run(greedy_search(task, tmp_path, 3, run_id="src"), "a2", "promote")
    runs = tmp_path / "runs"
    source = load_run(runs / "src")
    a2 = next(e for e in source.events if isinstance(e, ev.AttemptStarted) and e.attempt == "a2")
    step = next(
        e.step for e in source.events if isinstance(e, ev.ToolCall) and e.call_id == a2.call_id
    )
    forked = fork_run(source, task, at_step=step + 1, run_dir=runs / "fork", model="baseline")
    controller = resume_controller(forked, task, None)
    result = await _run(controller, "a3", "stop")
    return runs, final_line(controller.run_dir, result)


async def test_the_counts_add_up_with_a_stopped_and_a_lost_attempt_and_read_alike(
    tmp_path: Path, answer_task: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs, last = await _search_with_a_stopped_and_a_lost_attempt(tmp_path, answer_task)
    fork = runs / "fork"
    finished = {
        e.attempt: e.status
        for e in read_events(fork / "events.jsonl")
        if isinstance(e, ev.AttemptFinished)
    }
    assert finished == {"a1": "validated", "a2": "lost", "a3": "stopped"}

    # result.json: the counts add up to `tried`.
    attempts = json.loads((fork / "result.json").read_text())["attempts"]
    counted = {k: attempts[k] for k in ("validated", "buggy", "out_of_time", "stopped", "lost")}
    assert counted == {"validated": 1, "buggy": 0, "out_of_time": 0, "stopped": 1, "lost": 1}
    assert attempts["tried"] == 3 == sum(counted.values()) + attempts["running"]

    # The headless run's last line.
    assert f"· attempts {COUNTS}, best validation 0.5 (a1), graded a1," in last, last

    # `mlra runs`: the search column, each run in its own counts.
    _, lines = listing(runs, capsys)
    assert f"{COUNTS}, best a1 0.5, sub a1" in lines["fork"], lines["fork"]
    assert f"{SOURCE_COUNTS}, best a1 0.5, sub a1" in lines["src"], lines["src"]

    # The replay's verdict, where a finished run's replay opens.
    app = ReplayApp(ReplayModel.open(fork))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        verdict = str(app.query_one("#verdict", Static).content)
    assert f"attempts {COUNTS}, best a1 ·" in verdict, verdict

    # `mlra compare` and the batch report.
    m = matrix.build(load_all([fork, runs / "src"]))
    (row,) = [r for r in m.rows if r.name == "attempts"]
    assert row.cells == [COUNTS, SOURCE_COUNTS]
    write_report(tmp_path, plots=False)
    md = (tmp_path / "report.md").read_text()
    assert f"| {COUNTS} | a1 |" in md and f"| {SOURCE_COUNTS} | a1 |" in md
    rows = {r["run_id"]: r for r in json.loads((tmp_path / "report.json").read_text())["runs"]}
    assert (rows["fork"]["search_stopped"], rows["fork"]["search_lost"]) == (1, 1)


def test_a_result_json_from_before_the_counts_still_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A result.json written before `stopped`, `lost` and `running` were counted reads
    (they are 0 in it), is no result≠log for lacking them, and `mlra runs` gives the
    log's counts whole."""
    runs = tmp_path / "runs"
    tries = [
        Try("a1", "validated", 0.7),
        Try("a2", "buggy", why="no output"),
        Try("a3", "stopped", why="stopped by the supervisor"),
    ]
    run_dir = search_run(runs, "old", tries, submitted="a1")
    result = json.loads((run_dir / "result.json").read_text())
    for name in ("stopped", "lost", "running"):
        del result["attempts"][name]
    (run_dir / "result.json").write_text(json.dumps(result))
    summary = RunResult.model_validate(result).attempts
    assert summary is not None and (summary.stopped, summary.lost, summary.running) == (0, 0, 0)
    assert summary.in_words == "3 tried (1 validated, 1 buggy)"  # what it knew of
    _, lines = listing(runs, capsys)
    assert "result≠log" not in lines["old"]
    assert "3 tried (1 validated, 1 buggy, 1 stopped), best a1 0.7, sub a1" in lines["old"]
