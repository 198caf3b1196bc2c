"""An attempt at its own time limit (agent/agents/closing_validation.py) and the reserve
the time shares keep at the run's end for it (agent/loop/attempt_time.py): the
baseline's greedy search of the small `answer` task's recipe variants, real processes
and real grading."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop.attempt_finish import finished_event
from mlra.agent.run.controller import RunController
from mlra.console.text.attempt_lines import attempt_started_line
from mlra.tasks.spec import load_task
from tests.agent.cut_attempts import (
    cut,
    cut_once,
    cut_once_it_runs,
    events_of,
    until_it_wrote,
    writes_then_works_on,
)
from tests.agent.test_search import _scripted_search, greedy_search, sleeping_variant_task
from tests.conftest import answer_task_as
from tests.scripts import call, turn


async def test_an_attempt_at_its_time_limit_with_its_artifact_is_validated_and_submitted(
    tmp_path: Path, answer_task: Path
) -> None:
    """a1's recipe wrote its artifact and worked on past a1's time limit: it ended
    "buggy: its time limit was reached before a validation scored it", never validated,
    so the search had nothing to submit. Now its artifact is validated as it ends, a
    validation like any other, and the greedy policy submits it."""
    task = writes_then_works_on(answer_task, tmp_path, '[{ n = "42", s = "100" }]')
    controller = greedy_search(task, tmp_path, 1)

    async def a1s_limit_once_it_wrote(controller: RunController) -> None:
        await until_it_wrote(tmp_path / "runs", "a1")
        cut(controller, "a1")

    side = asyncio.ensure_future(a1s_limit_once_it_wrote(controller))
    result = await controller.run(agent_for)
    await side
    own = events_of(controller.run_dir / "attempts" / "a1")
    (finished,) = [e for e in own if isinstance(e, ev.RunFinished)]
    assert finished.reason == "deadline"  # its own limit, not the run's
    notices = [e for e in own if isinstance(e, ev.Notice) and e.kind == "validating_at_limit"]
    assert [n.message.split(", within")[0] for n in notices] == [
        "its time limit was reached with answer.txt in its workspace: validating it"
    ], notices
    (validation,) = [e for e in own if isinstance(e, ev.Validation)]
    assert validation.ok and validation.score == 0.5
    events = events_of(controller.run_dir)
    (a1,) = [e for e in events if isinstance(e, ev.AttemptFinished)]
    assert (a1.status, a1.score) == ("validated", 0.5)
    assert a1.validation_s == validation.duration_s
    (submission,) = [e for e in events if isinstance(e, ev.Submission)]
    assert submission.attempt == "a1" and submission.by == "agent"
    assert result.reason == "submitted" and result.score == 1.0


async def test_an_attempt_at_its_time_limit_with_no_artifact_ends_unvalidated(
    tmp_path: Path, answer_task: Path
) -> None:
    """a1's recipe had written nothing when its time ran out: nothing is validated, and
    it says its time limit ended it (not "its artifact could not be validated: [killed
    after 0.0 s ...]", as if the artifact were at fault), "out of time", not "buggy":
    nothing in its recipe to look for."""
    task = sleeping_variant_task(answer_task, tmp_path, '{ n = "42", s = "100" }', "[{}]")
    controller = greedy_search(task, tmp_path, 1)

    side = asyncio.ensure_future(cut_once_it_runs(controller, "a1"))
    result = await controller.run(agent_for)
    await side
    own = events_of(controller.run_dir / "attempts" / "a1")
    assert not any(isinstance(e, ev.Validation) for e in own)
    (a1,) = [e for e in events_of(controller.run_dir) if isinstance(e, ev.AttemptFinished)]
    assert (a1.status, a1.why) == (
        "out of time",
        "its time limit was reached before a validation scored it",
    )
    assert result.reason == "no_submission"


async def test_the_last_wave_ends_before_the_runs_deadline_with_time_to_validate(
    tmp_path: Path, answer_task: Path
) -> None:
    """Two attempts in 60 s: a2, the last, worked on past its share. Its share was all
    the run had left, so the run's deadline stopped it and graded a1 ("finished
    (deadline)"). Now its share ends the reserve before the run's deadline, measured on
    a1's validation: a2 is validated in it, and the greedy policy submits it. On the
    real clock (57 s): moving the run's and a2's limits on once a2 runs raced a2's own
    watch of its limit, which then ended it with the run's reserve spent."""
    task = writes_then_works_on(answer_task, tmp_path, '[{}, { n = "42", s = "100" }]')
    controller = greedy_search(task, tmp_path, 2, time_limit_s=60, attempt_min_s=5)
    result = await controller.run(agent_for)
    events = events_of(controller.run_dir)
    started = {e.attempt: e for e in events if isinstance(e, ev.AttemptStarted)}
    finished = {e.attempt: e for e in events if isinstance(e, ev.AttemptFinished)}
    a1, a2 = started["a1"], started["a2"]
    assert a1.reserve_s == 6.0  # none measured yet: the evaluator's 1m, at most 10% of 60 s
    measured = finished["a1"].validation_s
    assert measured > 0 and a2.reserve_s == min(round(measured + 10, 3), 6.0)
    assert abs(a2.t + a2.time_limit_s + a2.reserve_s - 60) < 0.5  # ends the reserve before
    assert "6s kept at the run's end to validate" in attempt_started_line(a2)
    own = events_of(controller.run_dir / "attempts" / "a2")
    assert next(e for e in own if isinstance(e, ev.RunFinished)).reason == "deadline"
    assert (finished["a2"].status, finished["a2"].score) == ("validated", 0.5)
    assert finished["a1"].score == 0.0
    (submission,) = [e for e in events if isinstance(e, ev.Submission)]
    assert submission.attempt == "a2"
    assert result.reason == "submitted" and result.score == 1.0


async def test_a_workers_attempt_at_its_time_limit_is_validated_and_submitted(
    tmp_path: Path, answer_task: Path
) -> None:
    """A model's worker wrote answer.txt and then ran a command past its attempt's limit
    (cut once the answer is written: an 8 s limit was sometimes spent before the worker's
    command ran, on a loaded machine): the command is stopped, the answer validated as
    the attempt ends, and the supervisor submits it."""
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Write 42", time_limit=120)),
            turn("", call("attempt_wait", attempt="a1")),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt; sleep 100", timeout=300)),
            turn("", call("bash", command="sleep 100", timeout=300)),  # the deadline, at once
        ],
    }

    async def a1s_limit_once_it_wrote(controller: RunController) -> None:
        await until_it_wrote(tmp_path / "runs", "a1")
        cut(controller, "a1")

    controller, result, _ = await _scripted_search(
        tmp_path / "runs",
        answer_task,
        script,
        during=a1s_limit_once_it_wrote,
        search="llm",
        attempts=1,
        attempt_min_s=5,
    )
    own = events_of(controller.run_dir / "attempts" / "a1")
    killed = next(e for e in own if isinstance(e, ev.ToolResult) and e.tool == "bash")
    assert not killed.ok  # its time-out, bound by the deadline, or the deadline itself
    (validation,) = [e for e in own if isinstance(e, ev.Validation)]
    assert validation.ok and validation.score == 0.5
    events = events_of(controller.run_dir)
    (a1,) = [e for e in events if isinstance(e, ev.AttemptFinished)]
    assert (a1.status, a1.score) == ("validated", 0.5)
    assert result.reason == "submitted" and result.score == 1.0


async def test_an_attempt_whose_artifact_fails_at_its_limit_says_its_validation_failed(
    tmp_path: Path, answer_task: Path
) -> None:
    """The closing validation at a1's limit failed (answer.txt is a pipe, refused): a1 is
    buggy for that, not "its time limit was reached before a validation scored it",
    which would hide that its artifact was tried."""
    writes_then_works_on(answer_task, tmp_path, '[{ s = "100" }]')
    toml = tmp_path / "answer-long" / "task.toml"
    toml.write_text(toml.read_text().replace("echo {n} > answer.txt", "mkfifo answer.txt"))
    controller = greedy_search(load_task(toml.parent), tmp_path, 1)

    async def a1s_limit_once_it_wrote(controller: RunController) -> None:
        await until_it_wrote(tmp_path / "runs", "a1")
        controller.attempts.child("a1").clock.limit_s = 0.0

    side = asyncio.ensure_future(a1s_limit_once_it_wrote(controller))
    await controller.run(agent_for)
    await side
    events = events_of(controller.run_dir)
    (a1,) = [e for e in events if isinstance(e, ev.AttemptFinished)]
    assert a1.status == "buggy", a1
    assert a1.why.startswith("its artifact could not be validated: "), a1.why
    # A run taken up again recomputes an attempt's ending from its own log, which an
    # older mlra wrote with the notice of its validation at its limit kindless: the
    # same ending.
    (started,) = [e for e in events if isinstance(e, ev.AttemptStarted)]
    a1_dir = controller.run_dir / "attempts" / "a1"
    log = a1_dir / "events.jsonl"
    old = log.read_text().replace(',"kind":"validating_at_limit"', "")
    assert old != log.read_text()
    log.write_text(old)
    again = finished_event(started, a1_dir, controller.run_dir)
    assert (again.status, again.why) == (a1.status, a1.why)


async def test_an_attempt_at_its_limit_with_no_run_time_left_says_it_had_an_artifact(
    tmp_path: Path, answer_task: Path
) -> None:
    """a1 wrote its answer and worked on; as its limit is cut, the run has 2.5 s left (its
    clock held there), less than stopping its attempts takes past a closing validation:
    a1's answer is not validated. It said "its time limit was reached before a validation
    scored it", as if it had written nothing; now its why is the notice (of kind
    "no_time_to_validate") that the run had no time left to validate the answer it wrote.
    A log from before the kind still reads: the plain words again."""
    task = writes_then_works_on(answer_task, tmp_path, '[{ n = "42", s = "100" }]')
    controller = greedy_search(task, tmp_path, 1)

    async def no_time_left_once_it_wrote(controller: RunController) -> None:
        await until_it_wrote(tmp_path / "runs", "a1")
        controller.clock.limit_s = controller.clock.elapsed() + 2.5
        controller.clock.pause()  # the run's deadline never comes: nothing stops a1 for it
        cut(controller, "a1")

    side = asyncio.ensure_future(no_time_left_once_it_wrote(controller))
    result = await controller.run(agent_for)
    await side
    a1_dir = controller.run_dir / "attempts" / "a1"
    own = events_of(a1_dir)
    assert not any(isinstance(e, ev.Validation) for e in own)
    (notice,) = [e for e in own if isinstance(e, ev.Notice) and e.kind == "no_time_to_validate"]
    assert notice.message == (
        "its time limit was reached, and the run has no time left to validate the "
        "answer.txt in its workspace"
    )
    events = events_of(controller.run_dir)
    (a1,) = [e for e in events if isinstance(e, ev.AttemptFinished)]
    assert (a1.status, a1.why) == ("out of time", notice.message)
    assert result.reason == "no_submission"
    (started,) = [e for e in events if isinstance(e, ev.AttemptStarted)]
    log = a1_dir / "events.jsonl"
    log.write_text(log.read_text().replace(',"kind":"no_time_to_validate"', ""))
    again = finished_event(started, a1_dir, controller.run_dir)
    assert (again.status, again.why) == (
        "out of time",
        "its time limit was reached before a validation scored it",
    )


def _validating_script(*then: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """An LLM search of one attempt (its limit cut by the test) whose worker writes
    answer.txt and validates it, then goes on with `then`; the supervisor submits it."""
    return {
        "supervisor": [
            turn("", call("attempt_start", instructions="Write 42", time_limit=120)),
            turn("", call("attempt_wait", attempt="a1")),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("validate", path="answer.txt")),
            *then,
        ],
    }


async def test_an_attempt_that_validated_its_artifact_is_not_validated_again_at_its_limit(
    tmp_path: Path, answer_task: Path
) -> None:
    """The worker validated answer.txt, then worked on past its attempt's limit with the
    answer unchanged: its closing validation graded the same bytes a second time, the
    run's reserve spent for nothing. Now the attempt ends on the validation it has, and
    its log says why none followed."""
    script = _validating_script(
        turn("", call("bash", command="sleep 100", timeout=300)),  # the deadline
        turn("", call("bash", command="sleep 100", timeout=300)),
    )
    controller, result, _ = await _scripted_search(
        tmp_path / "runs",
        answer_task,
        script,
        during=lambda c: cut_once(c, "a1", lambda e: isinstance(e, ev.Validation)),
        search="llm",
        attempts=1,
        attempt_min_s=5,
    )
    own = events_of(controller.run_dir / "attempts" / "a1")
    (validation,) = [e for e in own if isinstance(e, ev.Validation)]
    assert validation.ok and validation.score == 0.5
    said = [e.message for e in own if isinstance(e, ev.Notice)]
    assert any("it had validated, unchanged since: not validated again" in m for m in said), said
    assert not any(e.kind == "validating_at_limit" for e in own if isinstance(e, ev.Notice))
    events = events_of(controller.run_dir)
    (a1,) = [e for e in events if isinstance(e, ev.AttemptFinished)]
    assert (a1.status, a1.score) == ("validated", 0.5)
    assert result.reason == "submitted" and result.score == 1.0


async def test_an_attempt_that_ends_with_the_artifact_it_validated_is_not_validated_again(
    tmp_path: Path, answer_task: Path
) -> None:
    """The worker validated answer.txt and reported, the answer unchanged: mlra's
    closing validation graded the same bytes a second time (minutes of lm-eval for a
    model). Now the attempt ends on the validation it has, and says so."""
    script = _validating_script(turn("", call("report", summary="answer.txt holds 42")))
    controller, result, _ = await _scripted_search(
        tmp_path / "runs", answer_task, script, search="llm", attempts=1
    )
    own = events_of(controller.run_dir / "attempts" / "a1")
    (validation,) = [e for e in own if isinstance(e, ev.Validation)]
    assert validation.ok and validation.score == 0.5
    said = [e.message for e in own if isinstance(e, ev.Notice)]
    assert any(
        "it ended with the answer.txt it had validated, unchanged since: not validated again" in m
        for m in said
    ), said
    (a1,) = [e for e in events_of(controller.run_dir) if isinstance(e, ev.AttemptFinished)]
    assert (a1.status, a1.score) == ("validated", 0.5)
    assert result.reason == "submitted" and result.score == 1.0


async def test_an_attempt_that_changed_its_artifact_after_validating_is_validated_as_it_ends(
    tmp_path: Path, answer_task: Path
) -> None:
    """The worker validated 41 (0.0), then wrote 42 and reported: what it ends with is
    validated, and is what counts."""
    script = _validating_script(
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    )
    script["worker"][0] = turn("", call("bash", command="echo 41 > answer.txt"))
    controller, _, _ = await _scripted_search(
        tmp_path / "runs", answer_task, script, search="llm", attempts=1
    )
    own = events_of(controller.run_dir / "attempts" / "a1")
    assert [e.score for e in own if isinstance(e, ev.Validation)] == [0.0, 0.5]
    assert not any(isinstance(e, ev.Notice) and e.kind == "validated_unchanged" for e in own)


async def test_an_attempt_that_put_back_an_artifact_a_tie_replaced_is_validated_as_it_ends(
    tmp_path: Path, answer_task: Path
) -> None:
    """The worker validated "42\\n", then "42" as good (a tie keeps the later copy, and
    the first one's goes), then put "42\\n" back: its result must be what it ends with,
    so that is validated again rather than skipped as validated already."""
    script = _validating_script(
        turn("", call("bash", command="printf 42 > answer.txt; sleep 1")),
        turn("", call("validate", path="answer.txt")),
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    )
    task_dir = answer_task_as(  # its two validations a second apart, not an hour
        answer_task, tmp_path, "answer", ('min_interval = "1h"', 'min_interval = "1s"')
    )
    controller, _, _ = await _scripted_search(
        tmp_path / "runs", task_dir, script, search="llm", attempts=1
    )
    own = events_of(controller.run_dir / "attempts" / "a1")
    first, tie, closing = [e for e in own if isinstance(e, ev.Validation)]
    assert first.score == tie.score == closing.score == 0.5
    assert first.sha256 == closing.sha256 != tie.sha256
    (a1,) = [e for e in events_of(controller.run_dir) if isinstance(e, ev.AttemptFinished)]
    assert a1.sha256 == closing.sha256
