"""How a search ends when nothing was submitted (agent/loop/evaluation.py's
nothing_validated): the baseline's greedy search of the small `answer` task, real
processes, the run's own clock brought forward to its deadline; and the manager's
`stop_all` at the deadline on an attempt whose own run had already ended."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop.attempt_time import raise_time_limit
from mlra.agent.loop.attempts import AttemptManager
from mlra.agent.record.eventlog import EventLog, read_events
from mlra.agent.record.state import fold
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.text.attempt_lines import attempt_finished_line
from mlra.tasks.spec import load_task
from tests.conftest import answer_task_as


def _slow_task(answer_task: Path, tmp_path: Path) -> Path:
    """The answer task whose recipe writes 41 (wrong) and then works on for 50 s, and
    whose starter already holds the right answer, 42: a search's own workspace is the
    starter, so grading it scores 1.0 for what no attempt did."""
    task = answer_task_as(
        answer_task,
        tmp_path,
        "answer-slow",
        (
            'submit = "answer.txt"',
            'submit = "answer.txt"\nvars = { n = "41" }\nvariants = [{}, { n = "40" }]',
        ),
        ('python -c \\"print(6 * 7)\\" > answer.txt', "echo {n} > answer.txt; sleep 50"),
    )
    (task / "starter" / "answer.txt").write_text("42\n")
    return task


async def test_a_deadline_with_no_attempt_validated_grades_nothing_and_says_so(
    tmp_path: Path, answer_task: Path
) -> None:
    """The deadline fell while the only attempt worked, unvalidated: the run graded its
    own workspace, the untouched starter, and scored 1.0 ("deadline: grading
    (default artifact)"). Now nothing is graded, and the ending says why and which
    attempt's workspace holds the artifact, unvalidated. The attempt read "stopped: the
    time limit was reached", as though a person had stopped it: now the run's time
    limit ended it, "out of time", as its own limit would have."""
    task = load_task(_slow_task(answer_task, tmp_path))
    cfg = RunConfig(
        task=task.name,
        model="baseline",
        runs_dir=tmp_path / "runs",
        isolation="none",
        search="greedy",
        attempts=1,
    )
    controller = RunController(cfg, task, None)

    async def deadline_once_a1_wrote(controller: RunController) -> None:
        answer = tmp_path / "runs"
        async with asyncio.timeout(120):
            while not any(answer.glob("*/attempts/a1/workspace/answer.txt")):  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        controller.clock.limit_s = controller.clock.elapsed() + 1.0

    side = asyncio.ensure_future(deadline_once_a1_wrote(controller))
    result = await controller.run(agent_for)
    await side
    events = read_events(controller.run_dir / "events.jsonl")
    assert not any(isinstance(e, ev.Submission | ev.EvaluationStarted) for e in events)
    finished = [e for e in events if isinstance(e, ev.AttemptFinished)]
    # Ended by the run's time limit, not "stopped" as though a person had stopped it.
    assert [(f.attempt, f.status, f.run_deadline) for f in finished] == [
        ("a1", "out of time", True)
    ]
    # As every display says it: the headless line, the tree, the result's counts.
    assert attempt_finished_line(finished[0]).startswith(
        "attempt a1 out of time: the run's time limit was reached before a validation "
        "scored it after "
    )
    assert "a1 [out of time]" in fold(events).attempts.render(0.0)
    assert result.attempts is not None and result.attempts.in_words == "1 tried (1 out of time)"
    assert result.reason == "deadline" and result.score is None
    a1 = controller.run_dir / "attempts" / "a1"
    assert result.message == (
        "the time limit was reached: its one attempt was not validated, so nothing was "
        f"graded (a1 holds answer.txt, unvalidated: `mlra eval {a1} --path answer.txt` "
        "grades it apart)"
    )
    assert result.attempts is not None and result.attempts.submitted is None


@pytest.mark.slow
async def test_a_wait_that_reaches_the_deadline_is_not_asked_again_and_again(
    tmp_path: Path, answer_task: Path
) -> None:
    """The greedy policy waits for its one attempt, which outlasts the run: its wait,
    bounded by the time left, returned at the deadline, and every wait after it at once
    ("Nothing ended within 0 s", 22 calls in the 10 ms before the deadline's watcher
    woke). The run's 31 s pass in full: marked slow. Its attempt's share ends before the
    run's deadline (the reserve at its end): given more, it outlasts the run."""
    task = load_task(_slow_task(answer_task, tmp_path))
    cfg = RunConfig(
        task=task.name,
        model="baseline",
        runs_dir=tmp_path / "runs",
        isolation="none",
        search="greedy",
        attempts=1,
        time_limit_s=31,
    )
    controller = RunController(cfg, task, None)

    async def a1_outlasts_the_run(controller: RunController) -> None:
        async with asyncio.timeout(60):
            while (a1 := controller.attempts.child("a1")) is None:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        # Its deadline and the time-out of a command it may have begun already: the
        # limit set alone left a command begun first to be killed at the share's end.
        raise_time_limit(a1, 1000.0, why="the test")

    side = asyncio.ensure_future(a1_outlasts_the_run(controller))
    result = await controller.run(agent_for)
    await side
    events = read_events(controller.run_dir / "events.jsonl")
    waits = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "attempt_wait"]
    assert result.reason == "deadline"
    assert 1 <= len(waits) <= 2, [w.output.splitlines()[0] for w in waits]


async def test_an_attempt_whose_own_run_had_ended_keeps_its_ending_at_the_run_deadline(
    tmp_path: Path,
) -> None:
    """a1's own run had ended (its validation failed, its run_finished written) and was
    only closing its sandbox when the run's deadline cancelled it: it read "out of time:
    the run's time limit was reached before a validation scored it", counted out of time
    where its recipe was at fault. Its own log says how it ended: buggy, and why."""
    appended: list[ev.Event] = []
    run = SimpleNamespace(run_dir=tmp_path, append=appended.append)  # all stop_all reads
    manager = AttemptManager(run)  # type: ignore[arg-type]
    closing = asyncio.Event()

    async def ends_then_closes(_m: object, _s: object, run_dir: Path, _r: bool) -> None:
        log = EventLog(run_dir / "events.jsonl")
        log.append(ev.Validation(artifact="answer.txt", ok=False, error="not a number"))
        log.append(ev.RunFinished(status="finished", reason="attempt_ended", message="ended"))
        log.close()
        closing.set()
        await asyncio.Event().wait()  # its sandbox closing, as long as it takes

    manager.launcher = ends_then_closes
    manager._launch(ev.AttemptStarted(attempt="a1", folder="attempts/a1"), resume=False)
    await asyncio.wait_for(closing.wait(), 10)
    await manager.stop_all("deadline: time limit reached", deadline=True)
    (finished,) = [e for e in appended if isinstance(e, ev.AttemptFinished)]
    assert (finished.status, finished.why, finished.run_deadline) == (
        "buggy",
        "its validation failed: not a number",
        False,
    )
