"""`--model replay:RUN` of a search whose run's deadline ended an attempt still running
(agent/loop/attempts.py `stop_all`): the recording reads it out of time, by the run's
time limit, and its replay, reaching the attempt's own limit first, adds no validation
the recording never had. A scripted search on the small `answer` task, 30 s, recorded
(its 30 s in full), then played back; real processes: marked slow. And how a replay
reads an old recording's notice of no time left at the attempt's limit."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop.attempt_finish import NO_TIME, no_time_at_limit, validating_at_limit
from mlra.agent.loop.attempt_time import raise_time_limit
from mlra.agent.loop.replay_provider import ReplayProvider
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.agent.cut_attempts import cut, until_it_wrote
from tests.agent.test_search import _scripted_search
from tests.scripts import call, turn

SCRIPT = {
    "supervisor": [
        turn("", call("attempt_start", instructions="Write 42, then work on")),
        turn("", call("attempt_wait", attempt="a1", timeout=600)),
    ],
    "worker": [
        turn("", call("bash", command="echo 42 > answer.txt; sleep 300", timeout=600)),
    ],
}
LIMITS = {"search": "llm", "attempts": 1, "time_limit_s": 30, "attempt_min_s": 5.0}
RAISE_S = 15
"""How far a1's limit, unstated to it, runs past its share: past the run's deadline
(its share ends 3 s before it, the reserve) by 12 s, however late it began."""


@pytest.mark.slow
async def test_a_replay_of_an_attempt_the_runs_deadline_ended_says_so_and_validates_nothing(
    tmp_path: Path, answer_task: Path
) -> None:
    """a1 writes its answer and works on past the run's deadline: its limit, not stated
    to it, runs 15 s past its share (as one whose run began late on a loaded machine),
    so the run's deadline ends it, unvalidated. Its replay reaches its own limit sooner
    (cut once it has written its answer, as a replay quicker than its recording): there
    it said "its time limit was reached, and the run has no time left to validate the
    answer.txt in its workspace", or validated it with time to spare, a closing
    validation the recording never had."""

    async def a1_outlasts_the_run(controller: RunController) -> None:
        async with asyncio.timeout(60):
            while (a1 := controller.attempts.child("a1")) is None:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        raise_time_limit(a1, a1.clock.limit_s + RAISE_S, why="the test", stated=False)

    recorded, result, _ = await _scripted_search(
        tmp_path / "rec", answer_task, SCRIPT, during=a1_outlasts_the_run, **LIMITS
    )
    assert result.reason == "deadline", result.message
    events = read_events(recorded.run_dir / "events.jsonl")
    (a1,) = [e for e in events if isinstance(e, ev.AttemptFinished)]
    assert (a1.status, a1.run_deadline) == ("out of time", True), a1

    provider = ReplayProvider.from_spec(f"replay:{recorded.run_dir}")
    config = RunConfig.model_validate(
        {
            "task": "answer",
            "model": f"replay:{recorded.run_dir}",
            "runs_dir": tmp_path / "replay",
            "isolation": "none",
            **LIMITS,
        }
    )
    controller = RunController(config, load_task(answer_task), provider)

    async def a1_at_its_limit_once_it_wrote() -> None:
        await until_it_wrote(tmp_path / "replay", "a1", "42")
        cut(controller, "a1")  # its own limit falls while its command still runs

    side = asyncio.ensure_future(a1_at_its_limit_once_it_wrote())
    try:
        replayed = await asyncio.wait_for(controller.run(agent_for), 120)
    finally:
        side.cancel()
    assert replayed.reason == "deadline", replayed.message
    own = read_events(controller.run_dir / "attempts" / "a1" / "events.jsonl")
    (ended,) = [e for e in own if isinstance(e, ev.RunFinished)]
    if ended.reason != "deadline":  # the run's deadline came first: nothing here to test
        pytest.skip(f"the replayed a1 never reached its own limit ({ended.message})")
    # It began no closing validation, nor said it had no time for one: the recording
    # has neither. It ends as its own limit ends one with nothing validated.
    assert not [e for e in own if isinstance(e, ev.Validation) or _at_limit(e)]
    (a1,) = [
        e
        for e in read_events(controller.run_dir / "events.jsonl")
        if isinstance(e, ev.AttemptFinished)
    ]
    assert a1.status == "out of time" and "by its user" not in a1.why, a1


def _at_limit(event: ev.Event) -> bool:
    """The notices of an attempt's closing validation at its limit, or of no time for one."""
    return validating_at_limit(event) or no_time_at_limit(event)


def test_a_recording_from_before_the_no_time_notice_had_its_kind_reached_its_limit() -> None:
    """An attempt's recording whose notice "its time limit was reached, and the run has
    no time left to validate ..." predates its kind: its replay read it as one that never
    reached its limit, so a replay stopped at its search's end (by the supervisor, the
    run's deadline) sooner than its recording would have added a closing validation."""
    words = (
        "its time limit was reached, and the run has no time left to validate the "
        "answer.txt in its workspace"
    )
    old = ev.Notice(level="warning", message=words)
    assert ReplayProvider(Path("rec"), [old]).at_limit
    assert ReplayProvider(Path("rec"), [old.model_copy(update={"kind": NO_TIME})]).at_limit
    other = ev.Notice(level="warning", message="its time limit is near")
    assert not ReplayProvider(Path("rec"), [other]).at_limit
