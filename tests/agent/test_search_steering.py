"""A person steering a search: a promotion of an attempt (the console's `p`, attach's,
the controller's `promote_attempt`) is a submission: the run ends `submitted`, its
`submission` says the user handed it in, and no display calls the attempt "the best
validated, graded because nothing was submitted"; a message is for an attempt's worker,
the search's run having none. Real searches on the small `answer` task, real grading."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.console.apps.headless_run import search_words
from mlra.console.text.headless import TranscriptDisplay
from mlra.console.text.run_rows import graded_unsubmitted, search_cell
from tests.agent.test_search import greedy_search, sleeping_variant_task


async def test_a_promoted_attempt_is_submitted_by_the_user(
    tmp_path: Path, answer_task: Path
) -> None:
    """a1 (42) validates at once; a2 sleeps until the person promotes a1, which ends the
    run and grades a1's kept copy."""
    task = sleeping_variant_task(
        answer_task, tmp_path, '{ n = "41", s = "0" }', '[{ n = "42" }, { s = "300" }]'
    )
    controller = greedy_search(task, tmp_path, 2)

    a2_started = asyncio.Event()  # one at a time: a1 has ended, validated, by then
    controller.subscribe(
        lambda e: (
            a2_started.set() if isinstance(e, ev.AttemptStarted) and e.attempt == "a2" else None
        )
    )

    async def promote_once_a1_validated() -> None:
        await a2_started.wait()
        assert controller.promote_attempt("a1")

    side = asyncio.ensure_future(asyncio.wait_for(promote_once_a1_validated(), 120))
    result = await controller.run(agent_for)
    await side
    events = read_events(controller.run_dir / "events.jsonl")
    submission = next(e for e in events if isinstance(e, ev.Submission))
    assert (submission.by, submission.attempt) == ("user", "a1")
    assert result.reason == "submitted" and result.score == 1.0
    assert result.message == "attempt a1 promoted by the user"
    assert result.attempts is not None and result.attempts.submitted == "a1"
    assert not graded_unsubmitted(result.reason, result.attempts.submitted)
    attempts = result.attempts.model_dump()
    assert "sub a1" in search_cell(attempts, graded_unsubmitted(result.reason, "a1"))
    assert "nothing was submitted" not in search_words(result)
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    for event in events:
        display.on_event(event)
    text = out.getvalue()
    assert (
        "submitted attempt a1's answer.txt (by the user) — attempt a1 promoted by the user" in text
    )
    assert "nothing was submitted" not in text
    assert "(attempt a1; validation 0.5, gap +0.5)" in text


async def test_a_message_for_the_worker_of_a_search_is_refused_saying_where_to_send_it(
    tmp_path: Path, answer_task: Path
) -> None:
    """A search's run has no worker of its own (its attempts have theirs): `i` (Msg
    worker) and `mlra ctl RUN inject` queued the message for a worker that never ran, so
    nobody read it; they are refused and say to message an attempt. The supervisor's
    messages still go through."""
    from mlra.agent.control.control_ops import Refused, act
    from mlra.control_socket import CtlRequest
    from tests.agent.test_search import _scripted_search
    from tests.scripts import call, turn

    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Sleep")),
            turn("", call("attempt_wait", attempt="a1", timeout=600)),
        ],
        "worker": [turn("", call("bash", command="sleep 300", timeout=600))],
    }
    said: list[str] = []

    async def message_while_a1_runs(controller: RunController) -> None:
        started = asyncio.Event()
        controller.subscribe(lambda e: started.set() if isinstance(e, ev.AttemptStarted) else None)
        await started.wait()
        try:
            act(controller, CtlRequest(op="inject", target="worker", text="try 42"))
        except Refused as exc:
            said.append(str(exc))
        said.append(act(controller, CtlRequest(op="inject", target="supervisor", text="hi")))
        assert controller.stop_attempt("a1")

    controller, _, _ = await _scripted_search(
        tmp_path / "runs",
        answer_task,
        script,
        during=message_while_a1_runs,
        search="llm",
        attempts=1,
    )
    assert said == [
        "refused: a search's workers are its attempts': m in the Attempts pane tells one",
        "message for the supervisor queued (it reads it at its next step)",
    ]
    events = read_events(controller.run_dir / "events.jsonl")
    injected = [e for e in events if isinstance(e, ev.Control) and e.action == "inject"]
    assert [e.target for e in injected] == ["supervisor"]


async def test_an_attempt_a_step_starts_is_paused_with_the_run(
    tmp_path: Path, answer_task: Path
) -> None:
    """Paused and stepped as a1 ends: the step's one action starts a2, and the run pauses
    again right after it. That pause reached only the attempts whose runs were made
    already, and a2's is made in a thread, so a2 trained on while the run stood still."""
    task = sleeping_variant_task(
        answer_task, tmp_path, '{ n = "41", s = "300" }', '[{ s = "0" }, { n = "42" }]'
    )
    controller = greedy_search(task, tmp_path, 2)
    repaused = asyncio.Event()

    def pause_and_step() -> None:
        controller.pause()
        controller.step()  # the wait for a1 is over; a2's attempt_start is the action

    def watch(event: ev.Event) -> None:
        if isinstance(event, ev.AttemptFinished) and event.attempt == "a1":
            asyncio.get_running_loop().call_soon(pause_and_step)  # before the wait returns
        if isinstance(event, ev.Control) and event.action == "pause" and event.source == "step":
            repaused.set()

    controller.subscribe(watch)
    a2_paused = False

    async def look() -> None:
        nonlocal a2_paused
        try:
            await repaused.wait()
            for _ in range(200):  # its run is made in a thread, then starts
                child = controller.attempts.children.get("a2")
                if child is not None and child.controls.paused:
                    a2_paused = True
                    break
                await asyncio.sleep(0.05)
        finally:
            controller.stop_attempt("a2")
            controller.resume()

    side = asyncio.ensure_future(asyncio.wait_for(look(), 120))
    result = await controller.run(agent_for)
    await side
    events = read_events(controller.run_dir / "events.jsonl")
    started = [e.attempt for e in events if isinstance(e, ev.AttemptStarted)]
    assert started == ["a1", "a2"]
    assert a2_paused
    assert result.attempts is not None and result.attempts.tried == 2
