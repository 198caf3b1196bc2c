"""An attempt started from a copy of its parent's workspace holds the parent's artifact
until it writes its own: that one, unchanged, is never validated or scored as the
child's (agent/run/attempt_copies.py `note_inherited`, tasks/validation.py), and a child
its time cut short is "out of time", not "buggy" (agent/loop/attempt_finish.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.run.controller import RunController
from mlra.console.text.attempt_lines import attempt_finished_line
from tests.agent.cut_attempts import (
    cut,
    cut_once_it_runs,
    events_of,
    until_it_wrote,
    writes_then_works_on,
)
from tests.agent.test_search import _scripted_search, greedy_search, sleeping_variant_task
from tests.scripts import call, turn

NOT_OWN = "no artifact of its own: the answer.txt in its workspace is a1's, unchanged"


async def test_a_child_cut_short_with_its_parents_artifact_is_out_of_time_not_scored(
    tmp_path: Path, answer_task: Path
) -> None:
    """a1 answers 42 at once (0.5); a2, a variant from a1, sleeps before it answers, and
    its time runs out with only a1's answer.txt in its workspace. It was validated as
    a2's ("its time limit was reached with answer.txt in its workspace: validating it"),
    scored with a1's model; when that validation timed out it was called "buggy". Now
    nothing is validated, and a2 ends "out of time", saying whose artifact it held."""
    task = sleeping_variant_task(
        answer_task, tmp_path, '{ n = "42", s = "0" }', '[{}, { s = "100" }]'
    )
    controller = greedy_search(task, tmp_path, 2)

    side = asyncio.ensure_future(cut_once_it_runs(controller, "a2"))
    result = await controller.run(agent_for)
    await side
    own = events_of(controller.run_dir / "attempts" / "a2")
    assert next(e for e in own if isinstance(e, ev.RunFinished)).reason == "deadline"
    assert not any(isinstance(e, ev.Validation) for e in own)
    notices = [e for e in own if isinstance(e, ev.Notice) and e.kind == "inherited_artifact"]
    assert [n.message for n in notices] == [NOT_OWN]
    events = events_of(controller.run_dir)
    started = {e.attempt: e for e in events if isinstance(e, ev.AttemptStarted)}
    assert started["a2"].parent == "a1"
    finished = {e.attempt: e for e in events if isinstance(e, ev.AttemptFinished)}
    assert (finished["a1"].status, finished["a1"].score) == ("validated", 0.5)
    a2 = finished["a2"]
    assert (a2.status, a2.score, a2.kept, a2.why) == ("out of time", None, None, NOT_OWN)
    assert attempt_finished_line(a2).startswith(f"attempt a2 out of time: {NOT_OWN}")
    (submission,) = [e for e in events if isinstance(e, ev.Submission)]
    assert submission.attempt == "a1"
    assert result.reason == "submitted" and result.score == 1.0


async def test_a_child_that_validates_or_submits_its_parents_artifact_is_not_scored(
    tmp_path: Path, answer_task: Path
) -> None:
    """a2, an improvement of a1, validates the answer.txt it was copied (a1's) and then
    submits: its worker is told it has no artifact of its own, nothing is validated,
    and a2 ends unscored ("buggy", it ended on its own), never with a1's 0.5."""
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Write 42")),
            turn("", call("attempt_wait", attempt="a1")),
            turn("", call("attempt_start", instructions="Improve", parent="a1")),
            turn("", call("attempt_wait", attempt="a2")),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="wrote 42")),
            turn("", call("validate")),
            turn("", call("submit", path="answer.txt")),
        ],
    }
    controller, result, _ = await _scripted_search(
        tmp_path / "runs", answer_task, script, search="llm", attempts=2
    )
    own = events_of(controller.run_dir / "attempts" / "a2")
    assert not any(isinstance(e, ev.Validation) for e in own)
    refused = next(e for e in own if isinstance(e, ev.ToolResult) and e.tool == "validate")
    assert not refused.ok and NOT_OWN in (refused.error or refused.output)
    finished = {
        e.attempt: e for e in events_of(controller.run_dir) if isinstance(e, ev.AttemptFinished)
    }
    assert (finished["a1"].status, finished["a1"].score) == ("validated", 0.5)
    a2 = finished["a2"]
    assert (a2.status, a2.score, a2.kept, a2.why) == ("buggy", None, None, NOT_OWN)
    assert result.reason == "submitted" and result.score == 1.0


async def test_a_validation_the_runs_clock_cuts_is_out_of_time_not_buggy(
    tmp_path: Path, answer_task: Path
) -> None:
    """a1 wrote its own answer and worked on past its limit; its validation, bound by the
    few seconds the run had left, timed out ("evaluation timed out after 13s"). It was
    "buggy: its artifact could not be validated", sending the user to look for a bug in
    the recipe. Now it is "out of time", its validation marked cut by the clock."""
    task = writes_then_works_on(answer_task, tmp_path, '[{ n = "42", s = "100" }]')
    check = task.root / "hidden" / "check.py"
    check.write_text(
        "import sys, time\nif len(sys.argv) > 4: time.sleep(100)\n" + check.read_text()
    )
    controller = greedy_search(task, tmp_path, 1)

    async def limits_once_a1_wrote(controller: RunController) -> None:
        await until_it_wrote(tmp_path / "runs", "a1")
        controller.clock.limit_s = controller.clock.elapsed() + 20.0
        cut(controller, "a1")

    side = asyncio.ensure_future(limits_once_a1_wrote(controller))
    await controller.run(agent_for)
    await side
    own = events_of(controller.run_dir / "attempts" / "a1")
    (validation,) = [e for e in own if isinstance(e, ev.Validation)]
    assert not validation.ok and validation.out_of_time, validation
    (a1,) = [e for e in events_of(controller.run_dir) if isinstance(e, ev.AttemptFinished)]
    assert a1.status == "out of time" and a1.score is None, a1
    assert a1.why.startswith("its validation was cut by the time left: evaluation timed out")
