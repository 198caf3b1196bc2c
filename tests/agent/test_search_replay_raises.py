"""`--model replay:RUN` of a search whose attempt's time limit a later start raised
(agent/loop/attempt_time.py): the raise is recorded in the search's log, and a replay's
raises fall as its own timing has them. Where the replay's fell lower, the attempt was
cut off by its deadline before its recording ran out, and the replay diverged. A
scripted search on the small `answer` task, recorded, then played back; real
processes, real grading. The search gives an attempt 5 s at least (`--attempt-min-time`,
30 s by default), so it fits in a 40 s limit."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop.replay_provider import ReplayProvider
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.tasks.spec import load_task
from tests.agent.raised_search import raising_script, run_scripted, search_config


def _script(delays: Path) -> dict[str, object]:
    """Each attempt's worker waits for the attempt `delays/<it>.after` names to start,
    if any, then sleeps as `delays/<it>` says and writes the answer: a2 waits for a3,
    then sleeps 22 s, past the 20 s it began with."""
    me = "a=$(basename $(dirname $PWD))"
    wait = f"{me}; while [ -e {delays}/$a.after ] && [ ! -e ../../$(cat {delays}/$a.after) ]; do sleep 0.1; done"
    sleep = f"{me}; sleep $(cat {delays}/$a); echo 42 > answer.txt"
    return raising_script(wait, sleep)


def _delays(folder: Path, **seconds: int) -> None:
    folder.mkdir(exist_ok=True)
    for attempt, s in seconds.items():
        (folder / attempt).write_text(f"{s}\n")


@pytest.mark.slow
async def test_a_replay_runs_an_attempt_as_long_as_its_recording_was_raised_to(
    tmp_path: Path, answer_task: Path
) -> None:
    delays = tmp_path / "delays"
    _delays(delays, a1=0, a2=22, a3=0)
    (delays / "a2.after").write_text("a3\n")
    result, recorded = await run_scripted(tmp_path / "rec", answer_task, _script(delays))
    assert result.reason == "submitted" and result.score == 1.0, result.message
    events = read_events(recorded.run_dir / "events.jsonl")
    started = {e.attempt: e for e in events if isinstance(e, ev.AttemptStarted)}
    assert started["a2"].time_limit_s <= 21 and started["a3"].raised["a2"] > 30

    # In the replay a2 waits for nothing, and a1 takes 15 s: a3 starts after a2 began
    # its 22 s sleep, bound by the 20 s it began with, a raise to a3's share too late.
    _delays(delays, a1=15)
    (delays / "a2.after").unlink()
    replay = ReplayProvider.from_spec(f"replay:{recorded.run_dir}")
    controller = RunController(
        search_config(tmp_path / "replay", f"replay:{recorded.run_dir}"),
        load_task(answer_task),
        replay,
    )
    replayed = await asyncio.wait_for(controller.run(agent_for), 120)
    events = read_events(controller.run_dir / "events.jsonl")
    finished = {e.attempt: e for e in events if isinstance(e, ev.AttemptFinished)}
    assert finished["a2"].status == "validated", finished["a2"].why
    assert replayed.reason == "submitted" and replayed.score == 1.0, replayed.message
    # The attempt's prompts still state the limit it began with, as its recording's did.
    a2 = read_events(controller.run_dir / "attempts" / "a2" / "events.jsonl")
    run_started = next(e for e in a2 if isinstance(e, ev.RunStarted))
    assert run_started.limits.time_limit_s == started["a2"].time_limit_s
