"""The Plan and Worker panes tell the truth: the supervisor's failed calls show, no
step is left "in progress" once the run has ended, a call's result replaces its
stream, and a line that never ends stays bounded.

The Plan pane's failed call comes from a real run (the scripted model server on
loopback, the real OpenAI SDK), seen in the replay console; the endings and the
transcript's buffers are fed the events those runs write.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from textual.app import App, ComposeResult
from textual.widgets import Static

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.recording import KILLED_BY_RUN_END
from mlra.agent.record.state import RunState
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.panes.plan import PlanPane
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.panes.transcript_entries import MAX_LINE_CHARS, OutputBuffer
from mlra.console.text.replay import ReplayModel
from tests.console.scripted_runs import scripted_run
from tests.console.test_headless_transcript_lines import transcript
from tests.scripts import call, supervisor_answering, turn


def _text(app: App[Any], selector: str) -> str:
    return str(app.query_one(selector, Static).content)


async def test_the_plan_pane_shows_the_supervisors_failed_calls(
    tmp_path: Path, answer_task: Path
) -> None:
    supervisor = [
        turn("A plan, badly written.", call("update_plan", steps="first answer, then submit")),
        *supervisor_answering(),
    ]
    worker = [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="done")),
    ]
    result = await scripted_run(tmp_path, answer_task, supervisor, worker)
    assert result.reason == "submitted"
    app = ReplayApp(ReplayModel.open(tmp_path / "r"))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("end")
        await pilot.pause()
        log = _text(app, "#plan-log")
        assert "✗ update_plan failed:" in log
        steps = _text(app, "#plan-steps")
        assert "✓ 1. Answer the question" in steps
        # The supervisor submitted with step 2 never marked: it says so, not "pending".
        assert "✓ 2. Submit (done: the run submitted)" in steps


class PlanHost(App[None]):
    def compose(self) -> ComposeResult:
        yield PlanPane(id="plan")


def _plan_events(ending: ev.RunFinished) -> list[ev.Event]:
    steps = [
        ev.PlanStep(id="1", title="Train", status="done"),
        ev.PlanStep(id="2", title="Tune", status="in_progress"),
        ev.PlanStep(id="3", title="Report", status="pending"),
    ]
    return [ev.PlanUpdated(steps=steps, reason="first plan"), ending]


async def _steps_after(events: list[ev.Event]) -> str:
    app = PlanHost()
    async with app.run_test(size=(120, 30)) as pilot:
        pane = app.query_one(PlanPane)
        state = RunState()
        for event in events:
            state.apply(event)
            pane.feed(event)
        pane.show(state)
        await pilot.pause()
        return _text(app, "#plan-steps")


async def test_steps_still_open_when_the_run_ends_say_how_it_ended() -> None:
    running = await _steps_after(
        _plan_events(ev.RunFinished(status="stopped", reason="stopped"))[:1]
    )
    assert "▶ 2. Tune" in running and "○ 3. Report" in running
    stopped = await _steps_after(_plan_events(ev.RunFinished(status="stopped", reason="deadline")))
    assert "✓ 1. Train" in stopped
    assert "■ 2. Tune (not finished: the run ended (deadline))" in stopped
    assert "○ 3. Report (not started: the run ended (deadline))" in stopped
    assert "▶" not in stopped
    submitted = await _steps_after(
        _plan_events(ev.RunFinished(status="finished", reason="submitted"))
    )
    assert "✓ 2. Tune (open when the run submitted)" in submitted
    # An attempt of a search hands nothing in: its open steps say it ended, in words.
    ended = await _steps_after(
        _plan_events(ev.RunFinished(status="finished", reason="attempt_ended"))
    )
    assert "■ 2. Tune (not finished: the attempt ended)" in ended
    assert "○ 3. Report (not started: the attempt ended)" in ended
    assert "attempt_ended" not in ended
    resumed = await _steps_after(
        [*_plan_events(ev.RunFinished(status="stopped", reason="stopped")), ev.RunResumed()]
    )
    assert "▶ 2. Tune" in resumed and "not finished" not in resumed


async def test_the_worker_alone_subtask_and_a_plan_without_a_reason_read_plainly() -> None:
    app = PlanHost()
    async with app.run_test(size=(120, 30)) as pilot:
        pane = app.query_one(PlanPane)
        state = RunState()
        steps = [ev.PlanStep(id="1", title="Train", status="pending")]
        for event in (
            ev.SubtaskStarted(subtask=1, instructions="The whole task is yours.", t=0),
            ev.PlanUpdated(steps=steps, t=62),
        ):
            state.apply(event)
            pane.feed(event)
        pane.show(state)
        await pilot.pause()
        log, shown = _text(app, "#plan-log"), _text(app, "#plan-steps")
    # `--agent worker`'s subtask has no plan step: it read "→ subtask 1 [None]: ...".
    assert "→ subtask 1: The whole task is yours." in log and "None" not in log
    assert "revised 1m02s" in shown and "revised 1m02s · revised" not in shown


def _call(call_id: str = "c1") -> ev.ToolCall:
    return ev.ToolCall(call_id=call_id, agent="worker", tool="bash", arguments={"command": "x"})


def test_the_result_replaces_the_stream_and_late_output_is_let_go() -> None:
    pane = TranscriptPane()
    pane.feed(_call())
    pane.feed(ev.ToolOutput(call_id="c1", text="".join(f"streamed {i}\n" for i in range(900))))
    entry = pane.tool_entry("c1")
    assert entry is not None and entry.output.lines == 900
    pane.feed(
        ev.ToolResult(
            call_id="c1",
            tool="bash",
            agent="worker",
            ok=True,
            output="head\n[... 8,000 characters cut ...]\ntail\n[exit code 0, 1.0 s]",
        )
    )
    assert entry.output.head == ["head", "[... 8,000 characters cut ...]", "tail"]
    pane.feed(ev.ToolOutput(call_id="c1", text="late, past the log's cap\n"))
    assert entry.output.lines == 3  # what the model read, and nothing after it


def test_a_call_killed_by_the_runs_end_says_so() -> None:
    pane = TranscriptPane()
    pane.feed(_call())
    pane.feed(
        ev.ToolResult(
            call_id="c1",
            tool="bash",
            agent="worker",
            ok=False,
            output="begun\n[killed after 12.5 s: the run ended (it was stopped) while ...]",
            duration_s=12.5,
            error=KILLED_BY_RUN_END,
        )
    )
    entry = pane.tool_entry("c1")
    assert entry is not None
    shown = entry.render_entry().plain
    assert "12.5s · killed: the run ended" in shown and "[killed after 12.5 s" in shown


def test_a_line_that_never_ends_stays_bounded() -> None:
    buffer = OutputBuffer()
    for i in range(20_000):  # a progress bar redrawn with carriage returns, no newline
        buffer.add(f"\repoch 1: {i / 200:.1f}% " + "#" * 50)
    assert len(buffer.partial) <= 2 * MAX_LINE_CHARS
    _, _, tail = buffer.view(expanded=False)
    assert tail[-1].startswith("epoch 1: 100.0%")
    for _ in range(1_000):  # and one without any carriage return
        buffer.add("x" * 1_000)
    assert len(buffer.partial) <= 2 * MAX_LINE_CHARS
    buffer.add("\n")
    assert buffer.lines == 1 and buffer.head[0].endswith("…")


def test_a_search_hand_in_and_a_later_regrade_are_told_apart() -> None:
    """`mlra eval` appends a grading after the run's end: the replay showed the run
    graded twice, the second time as if it were the run's own; and a search's hand-in
    read `submitted submission`, not which attempt's."""
    pane = TranscriptPane()
    score = {"ok": True, "metric": "acc", "score": 0.82, "baseline": 0.76, "top": 0.89}
    for event in [
        ev.Submission(path="submission", by="agent", attempt="a2", note="the best of 2"),
        ev.EvaluationStarted(evaluator="lm-eval", artifact="submission"),
        ev.EvaluationFinished(**score),
        ev.RunFinished(status="finished", reason="submitted", message="the agent submitted"),
        ev.EvaluationStarted(evaluator="lm-eval", artifact="submission", regrade_by="ann@box"),
        ev.EvaluationFinished(**score),
    ]:
        pane.feed(event)
    said = [entry.render_entry().plain for entry in pane._entries]
    assert "submitted attempt a2's submission — the best of 2" in said[0]
    assert "evaluating submission with lm-eval…" in said[1] and "score: acc = 0.82" in said[2]
    assert "re-grading submission with lm-eval (mlra eval by ann@box, after the run)…" in said[4]
    assert "re-graded: acc = 0.82" in said[5]


async def test_the_plan_pane_shows_the_supervisor_writing_until_its_answer_is_in(
    tmp_path: Path, answer_task: Path
) -> None:
    """A local model's first plan took minutes to write with the Plan and Worker panes
    blank: what the supervisor has written so far shows, and goes once the answer is in.
    The events are those a real run (scripted server, real SDK) wrote, fed as they came."""
    thinking = "Reading the task first.\nThe question is in question.txt.\n" + "x" * 600
    supervisor = [
        turn(
            thinking,
            call("update_plan", steps=[{"id": "1", "title": "Answer", "status": "pending"}]),
        ),
        *supervisor_answering()[1:],
    ]
    worker = [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="done")),
    ]
    await scripted_run(tmp_path, answer_task, supervisor, worker)
    events = read_events(tmp_path / "r" / "events.jsonl")
    first_delta = next(
        i for i, e in enumerate(events) if isinstance(e, ev.TextDelta) and e.agent == "supervisor"
    )
    answered = next(
        i for i, e in enumerate(events) if isinstance(e, ev.ModelCall) and e.agent == "supervisor"
    )
    app = PlanHost()
    async with app.run_test(size=(120, 30)) as pilot:
        pane = app.query_one(PlanPane)
        state = RunState()

        async def log_after(upto: int, start: int = 0) -> str:
            for event in events[start : upto + 1]:
                state.apply(event)
                pane.feed(event)
            pane.show(state)
            await pilot.pause()
            return _text(app, "#plan-log")

        writing = await log_after(first_delta)
        assert "supervisor writing: Reading the task first." in writing
        assert "supervisor messages appear here" not in writing
        last_delta = max(
            i
            for i, e in enumerate(events[:answered])
            if isinstance(e, ev.TextDelta) and e.agent == "supervisor"
        )
        # A long answer shows its newest part, one line's worth, not the whole of it.
        tail = await log_after(last_delta, first_delta + 1)
        assert "supervisor writing: …" in tail and "xxxx" in tail
        assert "Reading the task" not in tail
        done = await log_after(answered, last_delta + 1)
        assert "supervisor writing" not in done


async def test_what_the_supervisor_wrote_stays_when_the_deadline_cuts_its_answer() -> None:
    """Qwen2.5-Coder-0.5B on a busy llama-server wrote its first plan for seven minutes
    and the run's time limit cut the call: the Plan pane went back to "no plan yet" and
    "supervisor messages appear here", as if it had written nothing."""
    written = '```json { "name": "update_plan", "arguments": { "steps": [ {'
    events: list[ev.Event] = [
        ev.StepStarted(agent="supervisor", step=0, turn=1, t=0.0),
        ev.ModelAnswering(agent="supervisor", turn=1, first_token_s=161.8, t=161.9),
        ev.TextDelta(agent="supervisor", turn=1, text=written[:20], t=170.0),
        ev.TextDelta(agent="supervisor", turn=1, text=written[20:], t=400.0),
        ev.ModelError(
            agent="supervisor",
            model="openai/q",
            cut_off="deadline",
            t=600.0,
            error="the run's time limit cut off supervisor's model call",
        ),
        ev.RunFinished(status="finished", reason="deadline", message="the time limit", t=600.0),
    ]
    app = PlanHost()
    async with app.run_test(size=(120, 30)) as pilot:
        pane = app.query_one(PlanPane)
        state = RunState()
        for event in events:
            state.apply(event)
            pane.feed(event)
        pane.show(state)
        await pilot.pause()
        log = _text(app, "#plan-log")
    assert f"10m00s cut off: {written}" in " ".join(log.split()), log
    assert "supervisor writing" not in log and "appear here" not in log


async def _long_plan_run(tmp_path: Path, answer_task: Path) -> Path:
    """A real run whose supervisor plans ten steps with long notes, as a small local
    model did with tiny-lm's prompt, then has the question answered and submits."""
    steps = [
        {"id": f"s{i}", "title": f"Step {i}", "status": "pending", "note": "a long note " * 8}
        for i in range(1, 11)
    ]
    supervisor = [
        turn("", call("update_plan", steps=steps)),
        turn("", call("assign_subtask", step_id="s1", instructions="Answer question.txt.")),
        turn("", call("submit", path="answer.txt", note="the answer")),
    ]
    worker = [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="done")),
    ]
    await scripted_run(tmp_path, answer_task, supervisor, worker)
    return tmp_path / "r"


async def _plan_steps_shown(run_dir: Path, size: tuple[int, int]) -> tuple[str, int, int]:
    """The steps' text at the run's end, its lines, and the lines the screen gives it."""
    app = ReplayApp(ReplayModel.open(run_dir))
    async with app.run_test(size=size) as pilot:
        await pilot.press("end")
        await pilot.pause()
        await pilot.pause()
        steps = app.query_one("#plan-steps", Static)
        text = str(steps.content)
        return text, len(text.splitlines()), steps.size.height


async def test_a_long_plan_gets_the_plan_panes_room(tmp_path: Path, answer_task: Path) -> None:
    """The Plan pane is as tall as what it holds: its room was reckoned from its own
    height, so a ten-step plan that came while it held two lines showed one step and
    "9 more" on a 160x48 screen with the Resources pane half empty, and the steps' area,
    a percentage of that height, cut lines off with no "more" line to say so."""
    run_dir = await _long_plan_run(tmp_path, answer_task)
    text, lines, height = await _plan_steps_shown(run_dir, (160, 48))
    assert all(f"s{i}. Step {i}" in text for i in range(1, 11)), text
    assert "more" not in text
    assert height >= lines, f"{lines} lines of steps in {height} rows:\n{text}"
    # A small screen lists fewer, says how many more, and still shows every line it lists.
    text, lines, height = await _plan_steps_shown(run_dir, (80, 24))
    assert "more" in text and "s1. Step 1" in text
    assert height >= lines, f"{lines} lines of steps in {height} rows:\n{text}"


async def test_a_call_written_as_text_that_nothing_ran_says_so_and_what_the_worker_was_told(
    tmp_path: Path, answer_task: Path
) -> None:
    """Native tool calls only (`--tool-calls native`): the worker writes a call as text,
    to a tool that does not exist, then to one that does. Neither ran, and the Worker
    pane (and the headless lines) say so under the answer, and what the worker's next
    prompt told it, where both read as the agent's prose before; the supervisor's
    written call is said so in the Plan pane."""
    worker = [
        turn('{"name": "pretrain", "arguments": {"epochs": 3}}'),
        turn('```json\n{"name": "bash", "arguments": {"command": "ls"}}\n```'),
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="done")),
    ]
    supervisor = [
        turn('{"name": "update_plan", "arguments": {"steps": []}}'),
        *supervisor_answering(),
    ]
    result = await scripted_run(tmp_path, answer_task, supervisor, worker, tool_calls="native")
    assert result.reason == "submitted"
    unknown = "↳ a tool call written as text: there is no tool named 'pretrain', so nothing ran"
    unrun = "↳ a call to bash written as text, not as a tool call: nothing ran it"
    told = "↳ the worker was told: Act with a tool, or call `report` if the subtask is done"
    events = read_events(tmp_path / "r" / "events.jsonl")
    pane = TranscriptPane()  # as the live console feeds it, every event from the start
    for event in events:
        pane.feed(event)
    text = "\n".join(str(entry.render_entry()) for entry in pane._entries)
    assert text.index('"pretrain"') < text.index(unknown) < text.index(told) < text.index(unrun)
    assert text.count(told) == 2  # after each answer that ran nothing
    lines = transcript(events)
    assert unknown in lines and unrun in lines and lines.count(told) == 2
    planned = "↳ a call to update_plan written as text, not as a tool call: nothing ran it"
    assert planned in lines  # the supervisor's, in the Plan pane's words too
    # A replay at the end shows a window of the last steps, which the run's start (its
    # agents' tools) is given too.
    app = ReplayApp(ReplayModel.open(tmp_path / "r"))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("end")
        await pilot_until(pilot, lambda: planned in _text(app, "#plan-log"))
        shown = app.query_one(TranscriptPane)
        deadline = time.monotonic() + 30
        while unrun not in "\n".join(str(e.render()) for e in shown.children):
            assert time.monotonic() < deadline, [str(e.render()) for e in shown.children]
            await pilot.pause(0.05)


async def pilot_until(pilot: Any, check: Any, timeout: float = 30.0) -> None:
    """Wait on the screen's state (a pane fed as the app gets to it)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.05)
