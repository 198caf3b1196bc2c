"""A validation under way as its attempt's time limit falls (agent/agents/closing_validation.py,
agent/loop/held_calls.py): on the artifact as it stands at the limit it goes on as the
attempt's closing validation, within the run's time left, rather than being killed and
graded again from the start (minutes of lm-eval for a model); on an artifact changed
since, it is cut and the artifact as it is now is validated. An LLM search of one
attempt on the small `answer` task, a scripted worker, real processes and real grading,
whose grader says it began and waits for the test's word: the limit falls mid-grading
by events, not by wall-clock luck."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import mlra.tasks.validation as validation
from mlra import events as ev
from mlra.agent.record.recording import KILLED_BY_RUN_END
from mlra.agent.run.controller import RunController
from tests.agent.cut_attempts import cut, events_of
from tests.agent.test_search import _scripted_search
from tests.conftest import answer_task_as
from tests.scripts import call, turn

HELD_GRADER = """
import runpy, time
from pathlib import Path
first = not Path(GRADINGS).exists()
with open(GRADINGS, "a") as f:
    f.write("graded\\n")
while first and not Path(GO).exists():  # the first grading waits for the test's word
    time.sleep(0.05)
runpy.run_path(CHECK, run_name="__main__")
"""


def _held_grading_task(answer_task: Path, tmp_path: Path, *edits: tuple[str, str]) -> Path:
    """The answer task whose validation grader counts its gradings in tmp_path/gradings,
    and whose first one waits for tmp_path/go before it scores as the task's own does;
    `edits` of its task.toml besides."""
    task_dir = answer_task_as(
        answer_task,
        tmp_path,
        "answer",
        (
            'settings = { script = "hidden/check.py", args',
            'settings = { script = "hidden/held.py", args',
        ),
        *edits,
    )
    (task_dir / "hidden" / "held.py").write_text(
        f"GRADINGS = {str(tmp_path / 'gradings')!r}\nGO = {str(tmp_path / 'go')!r}\n"
        f"CHECK = {str(task_dir / 'hidden' / 'check.py')!r}\n" + HELD_GRADER
    )
    return task_dir


def _script(*worker: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """One attempt (its limit cut by the test) whose worker does `worker`, then waits;
    the supervisor submits it."""
    return {
        "supervisor": [
            turn("", call("attempt_start", instructions="Write 42", time_limit=120)),
            turn("", call("attempt_wait", attempt="a1")),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [*worker, turn("", call("bash", command="sleep 100", timeout=300))],
    }


async def _until(controller: RunController, logged: Any, attempt: str = "a1") -> None:
    """Returns once the attempt's log holds an event `logged` picks."""
    async with asyncio.timeout(120):
        while (child := controller.attempts.child(attempt)) is None or not any(  # noqa: ASYNC110
            logged(e) for e in events_of(child.run_dir)
        ):
            await asyncio.sleep(0.05)


async def _until_grading(tmp_path: Path) -> None:
    """Returns once the grader has begun (it waits for the test's word)."""
    async with asyncio.timeout(120):
        while not (tmp_path / "gradings").exists():  # noqa: ASYNC110
            await asyncio.sleep(0.05)


def _at_limit(event: ev.Event) -> bool:
    return isinstance(event, ev.Notice) and event.kind == "validating_at_limit"


async def _one_attempt(
    tmp_path: Path, task_dir: Path, script: dict[str, Any], during: Any, **more: Any
) -> tuple[RunController, Any, Any]:
    """The LLM search of one attempt on `task_dir`, its workers scripted, `during` run
    beside it (the test's cut or stop)."""
    return await _scripted_search(
        tmp_path / "runs",
        task_dir,
        script,
        during=during,
        search="llm",
        attempts=1,
        attempt_min_s=5,
        **more,
    )


def _cut_while_it_grades(tmp_path: Path) -> Any:
    """Cuts the attempt's limit once its grader has begun, and lets the grading end once
    the attempt, at its limit, has said what becomes of it."""

    async def cut_while_it_grades(controller: RunController) -> None:
        await _until_grading(tmp_path)
        cut(controller, "a1")
        await _until(controller, _at_limit)
        (tmp_path / "go").touch()

    return cut_while_it_grades


async def test_a_validation_under_way_at_the_limit_goes_on_as_the_closing_one(
    tmp_path: Path, answer_task: Path
) -> None:
    """The worker's validation of answer.txt was grading when its attempt's limit fell,
    the answer unchanged: it was killed, and the closing validation graded the same
    bytes again from the start. Now it goes on as the closing validation: one grading,
    its call's own result, no call killed, and the log says so."""
    task_dir = _held_grading_task(answer_task, tmp_path)
    script = _script(
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("validate", path="answer.txt")),
    )

    controller, result, _ = await _one_attempt(
        tmp_path, task_dir, script, _cut_while_it_grades(tmp_path)
    )
    assert (tmp_path / "gradings").read_text().splitlines() == ["graded"]  # graded once
    own = events_of(controller.run_dir / "attempts" / "a1")
    assert next(e for e in own if isinstance(e, ev.RunFinished)).reason == "deadline"
    (asked,) = [e for e in own if isinstance(e, ev.ToolCall) and e.tool == "validate"]
    (answered,) = [e for e in own if isinstance(e, ev.ToolResult) and e.tool == "validate"]
    assert answered.call_id == asked.call_id and answered.ok, answered.output
    assert answered.error != KILLED_BY_RUN_END
    (validation,) = [e for e in own if isinstance(e, ev.Validation)]
    assert validation.call_id == asked.call_id
    assert validation.ok and validation.score == 0.5
    (notice,) = [e for e in own if _at_limit(e)]
    assert notice.message.startswith(
        "its time limit was reached with answer.txt in its workspace: its validation "
        f"under way ({asked.call_id}, "
    ), notice.message
    assert "goes on as the closing one, within the " in notice.message, notice.message
    assert asked.seq < notice.seq < validation.seq < answered.seq
    events = events_of(controller.run_dir)
    (a1,) = [e for e in events if isinstance(e, ev.AttemptFinished)]
    assert (a1.status, a1.score) == ("validated", 0.5)
    assert result.reason == "submitted" and result.score == 1.0


async def test_a_validation_under_way_of_an_artifact_changed_since_is_cut_at_the_limit(
    tmp_path: Path, answer_task: Path
) -> None:
    """The worker validated 41, and a job of its wrote 42 while that grading ran: at the
    limit the grading of 41 is cut (its result is no longer the attempt's), and 42, as
    its workspace holds it, is validated; the notice says why the one under way went."""
    task_dir = _held_grading_task(answer_task, tmp_path)
    rewrite = f"until [ -e {tmp_path / 'gradings'} ]; do sleep 0.05; done; echo 42 > answer.txt"
    script = _script(
        turn("", call("bash", command="echo 41 > answer.txt")),
        turn("", call("job_start", command=rewrite)),
        turn("", call("validate", path="answer.txt")),
    )

    async def cut_once_it_changed(controller: RunController) -> None:
        await _until(controller, lambda e: isinstance(e, ev.JobEnded))
        cut(controller, "a1")

    controller, result, _ = await _one_attempt(tmp_path, task_dir, script, cut_once_it_changed)
    assert len((tmp_path / "gradings").read_text().splitlines()) == 2
    own = events_of(controller.run_dir / "attempts" / "a1")
    worker = next(e for e in own if isinstance(e, ev.ToolCall) and e.tool == "validate")
    cut_one = next(e for e in own if isinstance(e, ev.ToolResult) and e.call_id == worker.call_id)
    assert not cut_one.ok and cut_one.error == KILLED_BY_RUN_END
    (notice,) = [e for e in own if _at_limit(e)]
    assert notice.message.startswith(
        "its time limit was reached with answer.txt in its workspace: validating it (its "
        f"validation under way, {worker.call_id}, was of it as it was before it changed: cut)"
    ), notice.message
    (closing,) = [e for e in own if isinstance(e, ev.Validation)]
    assert closing.call_id != worker.call_id and closing.ok and closing.score == 0.5
    assert cut_one.seq < notice.seq < closing.seq
    (a1,) = [e for e in events_of(controller.run_dir) if isinstance(e, ev.AttemptFinished)]
    assert (a1.status, a1.score) == ("validated", 0.5)
    assert result.reason == "submitted" and result.score == 1.0


async def test_a_validation_under_way_at_the_limit_keeps_to_the_runs_time_left(
    tmp_path: Path, answer_task: Path
) -> None:
    """The run has 10 s left as the worker validates, and its grader never ends on its
    own: the grading that goes on at the attempt's limit is stopped by the time the run
    had left as it began (less the margin the run's stop of its attempts takes), as a
    closing validation begun there would be, not by the evaluator's 1m, and the attempt
    ends out of time. The run is given more time once the grading has begun: that moves
    nothing of its time-out, and the run's own deadline, no longer 2 s behind it, cannot
    end the attempt first on a loaded machine."""
    task_dir = _held_grading_task(answer_task, tmp_path)
    script = _script(
        turn("", call("bash", command="echo 42 > answer.txt")),
        {**turn("", call("validate", path="answer.txt")), "hold": "validate"},
    )
    lowered: list[float] = []

    async def little_left_then_cut(controller: RunController) -> None:
        await _until(controller, lambda e: isinstance(e, ev.ToolResult) and e.tool == "bash")
        controller.clock.limit_s = controller.clock.elapsed() + 10.0
        lowered.append(controller.clock.limit_s)  # the worker's validation may start
        await _until_grading(tmp_path)  # its time-out set: the run's time left, less 2 s
        controller.clock.limit_s += 120.0
        cut(controller, "a1")

    controller, result, _ = await _one_attempt(
        tmp_path,
        task_dir,
        script,
        little_left_then_cut,
        release=("validate", lambda _: bool(lowered)),
    )
    own = events_of(controller.run_dir / "attempts" / "a1")
    assert any(_at_limit(e) for e in own)
    (validation,) = [e for e in own if isinstance(e, ev.Validation)]
    assert validation.out_of_time and not validation.ok
    assert validation.duration_s < 10.0
    (a1,) = [e for e in events_of(controller.run_dir) if isinstance(e, ev.AttemptFinished)]
    assert a1.status == "out of time", a1
    assert a1.why.startswith("its validation was cut by the time left"), a1.why
    assert result.reason != "submitted"  # nothing validated to submit


def _copying(event: ev.Event) -> bool:
    return isinstance(event, ev.Notice) and "was still copying" in event.message


async def test_a_validation_still_copying_the_artifact_at_the_limit_is_waited_for(
    tmp_path: Path, answer_task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit fell while the worker's validation was still copying answer.txt (a model
    of gigabytes takes a while): the closing validation began beside it, waited behind
    it for the validator, then graded the same bytes again. Now the copy is waited for,
    said so, and the validation goes on as the closing one: one grading. The copy is the
    real one, held back until the test lets it go."""
    task_dir = _held_grading_task(answer_task, tmp_path)
    copying, thaw = threading.Event(), threading.Event()
    real_freeze = validation.freeze

    def held_freeze(*args: Any, **kwargs: Any) -> Any:
        if not copying.is_set():  # the worker's: held until the limit has fallen
            copying.set()
            thaw.wait(120)
        return real_freeze(*args, **kwargs)

    monkeypatch.setattr(validation, "freeze", held_freeze)
    script = _script(
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("validate", path="answer.txt")),
    )

    async def cut_while_it_copies(controller: RunController) -> None:
        async with asyncio.timeout(120):
            while not copying.is_set():  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        cut(controller, "a1")
        await _until(controller, lambda e: _copying(e) or _at_limit(e))
        thaw.set()
        await _until(controller, _at_limit)
        (tmp_path / "go").touch()

    try:
        controller, result, _ = await _one_attempt(tmp_path, task_dir, script, cut_while_it_copies)
    finally:
        thaw.set()
    assert (tmp_path / "gradings").read_text().splitlines() == ["graded"]  # graded once
    own = events_of(controller.run_dir / "attempts" / "a1")
    (asked,) = [e for e in own if isinstance(e, ev.ToolCall) and e.tool == "validate"]
    (waited,) = [e for e in own if _copying(e)]
    assert waited.message == (
        f"its time limit was reached as its validation under way ({asked.call_id}) was "
        "still copying answer.txt: waiting for that copy, to tell whether it is the "
        "artifact as it stands"
    )
    (notice,) = [e for e in own if _at_limit(e)]
    assert f"its validation under way ({asked.call_id}, " in notice.message, notice.message
    (validation_,) = [e for e in own if isinstance(e, ev.Validation)]
    assert validation_.call_id == asked.call_id and validation_.score == 0.5
    assert asked.seq < waited.seq < notice.seq < validation_.seq
    (a1,) = [e for e in events_of(controller.run_dir) if isinstance(e, ev.AttemptFinished)]
    assert (a1.status, a1.score) == ("validated", 0.5)
    assert result.reason == "submitted" and result.score == 1.0


async def test_a_task_artifact_named_with_dot_slash_is_the_one_under_way(
    tmp_path: Path, answer_task: Path
) -> None:
    """The task names its artifact `./answer.txt`, and the worker's validation of it (the
    default) grades as the limit falls: its path, as the call names it, `answer.txt`,
    was told from the task's and the one under way was cut as of another artifact, the
    same bytes graded again. Now it goes on as the closing one: one grading."""
    task_dir = _held_grading_task(
        answer_task, tmp_path, ('artifact = "answer.txt"', 'artifact = "./answer.txt"')
    )
    script = _script(
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("validate")),
    )

    controller, result, _ = await _one_attempt(
        tmp_path, task_dir, script, _cut_while_it_grades(tmp_path)
    )
    assert (tmp_path / "gradings").read_text().splitlines() == ["graded"]  # graded once
    own = events_of(controller.run_dir / "attempts" / "a1")
    (asked,) = [e for e in own if isinstance(e, ev.ToolCall) and e.tool == "validate"]
    (notice,) = [e for e in own if _at_limit(e)]
    assert notice.message.startswith(
        "its time limit was reached with answer.txt in its workspace: its validation "
        f"under way ({asked.call_id}, "
    ), notice.message
    (validation_,) = [e for e in own if isinstance(e, ev.Validation)]
    assert validation_.call_id == asked.call_id and validation_.score == 0.5
    assert result.reason == "submitted" and result.score == 1.0


@pytest.mark.parametrize("stop", ["the search", "the attempt"])
async def test_a_held_validation_a_stop_cuts_says_it_was_stopped(
    tmp_path: Path, answer_task: Path, stop: str
) -> None:
    """The user stops the search, or its attempt, while the validation under way at the
    attempt's limit goes on as its closing one: the grading is killed, and its result
    said the run ended "(its time limit was reached)", as if the limit had cut it. It
    says it was stopped, as any call a stop kills does."""
    task_dir = _held_grading_task(answer_task, tmp_path)
    script = _script(
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("validate", path="answer.txt")),
    )

    async def stop_while_held(controller: RunController) -> None:
        await _until_grading(tmp_path)
        cut(controller, "a1")
        await _until(controller, _at_limit)
        if stop == "the search":
            controller.request_stop()
        else:
            assert controller.stop_attempt("a1")

    try:
        controller, _, _ = await _one_attempt(tmp_path, task_dir, script, stop_while_held)
    finally:
        (tmp_path / "go").touch()  # a grader left running by a failure ends
    own = events_of(controller.run_dir / "attempts" / "a1")
    (asked,) = [e for e in own if isinstance(e, ev.ToolCall) and e.tool == "validate"]
    (answered,) = [e for e in own if isinstance(e, ev.ToolResult) and e.tool == "validate"]
    assert answered.call_id == asked.call_id and answered.error == KILLED_BY_RUN_END
    assert "the run ended (it was stopped) while this call was running" in answered.output, (
        answered.output
    )
    assert not [e for e in own if isinstance(e, ev.Validation)]
    (a1,) = [e for e in events_of(controller.run_dir) if isinstance(e, ev.AttemptFinished)]
    assert a1.status == "stopped", a1
