"""A search's attempt out of time is no bug: the greedy policy says so when it starts a
child with less time than its parent took to validate (a notice of kind "short_share",
agent/loop/attempt_time.py), and it improves the best rather than debug an attempt its
time ended (agent/agents/search.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.console.cli.cli import main
from mlra.tools.attempts import short_share_line
from tests.agent.test_search import _scripted_search, _writes, greedy_search, sleeping_variant_task
from tests.scripts import call, turn


def _events(run_dir: Path) -> list[ev.Event]:
    return read_events(run_dir / "events.jsonl")


async def _once_it_runs(controller: RunController, attempt: str) -> RunController:
    """The attempt's own run, once its first command has begun."""
    async with asyncio.timeout(120):
        while (child := controller.attempts.child(attempt)) is None or not any(  # noqa: ASYNC110
            isinstance(e, ev.ToolCall) for e in _events(child.run_dir)
        ):
            await asyncio.sleep(0.05)
    return child


async def test_greedy_says_when_a_child_gets_less_time_than_its_parent_took(
    tmp_path: Path, answer_task: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """a1, the plain recipe, sleeps 16 s; as it starts, the run's time is cut to end 12 s
    after that sleep, so that a2, its improvement, gets what is left: at most 12 s, less
    than a1 took whatever the load (and a1 has those 12 s to be validated). a2 started
    with no word and ended out of time. Now the search's log and transcript say, as a2 starts, that it may run
    out of time, with the two times and the setting it changes; a2 still runs (the
    measure is one run's), and ends out of time as said."""
    task = sleeping_variant_task(
        answer_task, tmp_path, '{ n = "42", s = "16" }', '[{}, { n = "43" }]'
    )
    controller = greedy_search(task, tmp_path, 2, attempt_min_s=1.0)

    async def cut_the_runs_time() -> None:
        await _once_it_runs(controller, "a1")
        controller.clock.limit_s = controller.clock.elapsed() + 16.0 + 12.0

    side = asyncio.ensure_future(cut_the_runs_time())
    result = await controller.run(agent_for)
    await side
    events = _events(controller.run_dir)
    finished = {e.attempt: e for e in events if isinstance(e, ev.AttemptFinished)}
    a1, a2 = finished["a1"], finished["a2"]
    assert (a1.status, a2.status, a2.parent) == ("validated", "out of time", "a1")
    started = next(e for e in events if isinstance(e, ev.AttemptStarted) and e.attempt == "a2")
    assert started.time_limit_s < a1.duration_s
    (notice,) = [e for e in events if isinstance(e, ev.Notice) and e.kind == "short_share"]
    assert notice.seq == started.seq + 1 and notice.level == "warning"
    assert notice.message.startswith("attempt a2 may run out of time: it has ")
    assert notice.message.endswith(
        f"s, less than the {round(a1.duration_s)}s its parent a1 took, and it sets n=43 (a1: 42)"
    )
    assert result.reason == "submitted" and result.attempts is not None
    assert (result.attempts.submitted, result.attempts.out_of_time) == ("a1", 1)

    assert main(["replay", str(controller.run_dir), "--no-tui"]) == 0
    told = [line.split("] ", 1)[-1] for line in capsys.readouterr().out.splitlines()]
    at = next(i for i, line in enumerate(told) if line.startswith("attempt a2 started"))
    assert told[at + 1] == f"! {notice.message}"


async def test_greedy_improves_the_best_rather_than_debug_an_attempt_out_of_time(
    tmp_path: Path, answer_task: Path
) -> None:
    """a1's worker trains past its time limit and writes nothing: it ends out of time. It
    is no bug to fix (a shorter run is the fix), so after the second draft validates, the
    greedy policy improves it; a buggy a1 would have been debugged."""
    script = {
        "worker": [
            turn("", call("bash", command="sleep 60", timeout=600)),
            *_writes("42", "wrote 42"),
            *_writes("24", "wrote 24"),
        ]
    }

    async def a1_runs_out_of_time(controller: RunController) -> None:
        a1 = await _once_it_runs(controller, "a1")
        a1.clock.limit_s = a1.clock.elapsed() + 0.5

    controller, result, _ = await _scripted_search(
        tmp_path / "runs",
        answer_task,
        script,
        during=a1_runs_out_of_time,
        search="greedy",
        attempts=3,
    )
    events = _events(controller.run_dir)
    started = [e for e in events if isinstance(e, ev.AttemptStarted)]
    finished = {e.attempt: e for e in events if isinstance(e, ev.AttemptFinished)}
    assert finished["a1"].status == "out of time"
    assert [(s.operator, s.parent) for s in started] == [
        ("draft", None),
        ("draft", None),
        ("improve", "a2"),
    ]
    assert not any(isinstance(e, ev.Notice) and e.kind == "short_share" for e in events)
    assert result.attempts is not None
    assert (result.attempts.buggy, result.attempts.out_of_time) == (0, 1)


async def test_a_supervisor_is_told_once_when_its_attempt_gets_less_time_than_its_parent_took(
    tmp_path: Path, answer_task: Path
) -> None:
    """a1's worker sleeps 2 s before it writes; the supervisor then starts a2 from a1 with
    1 s. The warning was the log's alone: a supervisor went on choosing work that could
    not finish. Its next request now carries it, in the result of the start it warns of,
    once: no later turn repeats it."""
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Write 42 into answer.txt")),
            turn("", call("attempt_wait", attempt="a1")),
            turn("", call("attempt_start", parent="a1", instructions="Again", time_limit=1)),
            turn("", call("attempt_stop", attempt="a2")),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command="sleep 2; echo 42 > answer.txt")),
            turn("", call("report", summary="wrote 42")),
            *_writes("42", "wrote 42 again"),
        ],
    }
    controller, result, server = await _scripted_search(
        tmp_path / "runs", answer_task, script, search="llm", attempts=2, attempt_min_s=1.0
    )
    events = _events(controller.run_dir)
    (notice,) = [e for e in events if isinstance(e, ev.Notice) and e.kind == "short_share"]
    assert notice.message.startswith("attempt a2 may run out of time: it has 1s, less than")
    line = short_share_line(notice)
    assert "\n" not in line
    sent = [json.dumps(r.body) for r in server.requests_for("supervisor")]
    assert len(sent) == 5
    assert [s.count(json.dumps(line)[1:-1]) for s in sent] == [0, 0, 0, 1, 1]
    assert result.reason == "submitted" and result.attempts is not None
    assert result.attempts.submitted == "a1"
