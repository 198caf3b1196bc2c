"""A call written as text that could not be read is said once, under the answer, where
the tools are in the prompt (`--tool-calls text`): the run's notice, the line under the
answer and the next prompt's note said the same thing three times in the Worker pane and
the headless lines. The log keeps the notice and the note.

A real run (the scripted model server on loopback, the real OpenAI SDK), its log fed to
the Worker pane and the headless lines, and a replay's screen waited on.
"""

from __future__ import annotations

import time
from pathlib import Path

from textual.widgets import Static

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.text.replay import ReplayModel
from tests.console.scripted_runs import scripted_run
from tests.console.test_headless_transcript_lines import transcript
from tests.scripts import call, supervisor_answering, turn

UNKNOWN = "↳ a tool call written as text: there is no tool named 'pretrain', so nothing ran"
BROKEN = "↳ a tool call written as text could not be read: "
NUDGE = "↳ the worker was told: Act with a tool, or call `report` if the subtask is done"


async def test_an_unread_call_is_said_once_under_the_answer(
    tmp_path: Path, answer_task: Path
) -> None:
    worker = [
        turn('{"name": "pretrain", "arguments": {"epochs": 3}}'),
        turn('{"name": "pretrain", "arguments": {"epochs": 3}}'),  # again: no notice
        turn('<tool_call>{"name": "bash", "arguments": {"command": </tool_call>'),
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="done")),
    ]
    result = await scripted_run(
        tmp_path, answer_task, supervisor_answering(), worker, tool_calls="text"
    )
    assert result.reason == "submitted"
    events = read_events(tmp_path / "r" / "events.jsonl")
    # The log keeps what it recorded: the notices, and the notes the prompts carried.
    notices = [e for e in events if isinstance(e, ev.Notice) and e.kind == "unread_call"]
    assert [(e.agent, "could not be read" in e.message) for e in notices] == [
        ("worker", True),
        ("worker", True),
    ], notices
    assert "there is no tool named 'pretrain'" in notices[0].problems[0]
    prompts = [e.prompt for e in events if isinstance(e, ev.StepStarted)]
    assert sum("[your last answer looked like a tool call" in p for p in prompts) == 3
    lines = transcript(events)
    pane = TranscriptPane()
    for event in events:
        pane.feed(event)
    shown = "\n".join(str(entry.render_entry()) for entry in pane._entries)
    for text in (lines, shown):
        assert "could not be read: there is no tool named" not in text, text  # the notice
        assert "was told: [your last answer" not in text, text  # the note
        assert text.count(UNKNOWN) == 2, text  # under each answer
        assert text.count(BROKEN) == 1, text  # the broken one's, from its notice
        assert text.count(NUDGE) == 3, text  # what the prompt said besides
        assert text.index("pretrain") < text.index(UNKNOWN) < text.index(NUDGE)
    # A replay's screen says the same, once.
    app = ReplayApp(ReplayModel.open(tmp_path / "r"))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("end")
        panel = app.query_one(TranscriptPane)
        deadline = time.monotonic() + 30
        while BROKEN not in (said := "\n".join(str(e.render()) for e in panel.children)):
            assert time.monotonic() < deadline, said
            await pilot.pause(0.05)
        assert "could not be read: there is no tool named" not in said
        assert "was told: [your last answer" not in said


def _worker_pane_and_lines(events: list[ev.Event]) -> list[str]:
    pane = TranscriptPane()
    for event in events:
        pane.feed(event)
    return ["\n".join(str(entry.render_entry()) for entry in pane._entries), transcript(events)]


def test_the_notice_is_told_by_its_kind_and_an_older_logs_by_its_words() -> None:
    """The displays find the notice of an unread call by its `kind`, whatever its words
    say; a log written before the field had only the words, and reads as it did."""
    answer = '<tool_call>{"name": "bash", "arguments": {"command": </tool_call>'
    problem = "a <tool_call> that is not valid JSON"
    typed = ev.Notice(
        level="warning",
        message="the worker wrote a call nobody could parse",  # other words than before
        kind="unread_call",
        agent="worker",
        problems=[problem],
        t=1,
    )
    older = ev.Notice.model_validate(
        {
            "type": "notice",
            "level": "warning",
            "message": f"worker's answer looked like a tool call that could not be read: "
            f"{problem} (nothing was run; its next prompt says so, each time it happens)",
            "t": 1,
        }
    )
    assert older.kind is None
    for notice in (typed, older):
        events: list[ev.Event] = [notice, ev.WorkerThought(text=answer, t=2)]
        for text in _worker_pane_and_lines(events):
            assert text.count(BROKEN + problem) == 1, text
            assert notice.message not in text, text  # said under the answer instead


async def test_the_supervisors_unread_call_is_said_in_the_plan_pane_only(
    tmp_path: Path, answer_task: Path
) -> None:
    """The supervisor's call that could not be read is said under its answer in the Plan
    pane, where its answers show, and nowhere in the Worker pane (which showed the run's
    notice of it as a line of its own)."""
    supervisor = [
        turn('<tool_call>{"name": "update_plan", "arguments": {"steps": </tool_call>'),
        *supervisor_answering(),
    ]
    worker = [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="done")),
    ]
    result = await scripted_run(tmp_path, answer_task, supervisor, worker, tool_calls="text")
    assert result.reason == "submitted"
    events = read_events(tmp_path / "r" / "events.jsonl")
    notices = [e for e in events if isinstance(e, ev.Notice) and e.kind == "unread_call"]
    assert [e.agent for e in notices] == ["supervisor"], notices
    worker_pane = _worker_pane_and_lines(events)[0]
    assert "could not be read" not in worker_pane, worker_pane
    app = ReplayApp(ReplayModel.open(tmp_path / "r"))
    async with app.run_test(size=(160, 48)) as pilot:
        plan_log = app.query_one("#plan-log", Static)
        panel = app.query_one(TranscriptPane)
        for key in ("end", "home", "end"):  # a plan rebuilt for the end, and one fed onwards
            await pilot.press(key)
            deadline = time.monotonic() + 30
            while BROKEN not in (planned := str(plan_log.content)) and key == "end":
                assert time.monotonic() < deadline, planned
                await pilot.pause(0.05)
            await pilot.pause()
            said = "\n".join(str(e.render()) for e in panel.children)
            assert "could not be read" not in said, said
        assert planned.count(BROKEN) == 1, planned
