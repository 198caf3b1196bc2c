"""Annotating steps from the consoles: keys in the live console (on a live scripted run,
through Textual's pilot) and in the replay of the same run, which jumps between the
notes and finds them by search. The notes are kept beside the log, never in it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Input, Static

from mlra import events as ev
from mlra.agent.record.annotations import (
    ANNOTATIONS_FILE,
    Annotation,
    append_annotation,
    read_annotations,
)
from mlra.agent.record.eventlog import EVENTS_FILE
from mlra.console.apps.app import MlraApp
from mlra.console.apps.attach_app import AttachApp
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.panes.transcript_entries import NoteEntry, ToolEntry
from mlra.console.screens.screens import HelpScreen, PromptScreen
from mlra.console.text.attach_run import RemoteRun
from mlra.console.text.replay import ReplayModel
from tests.console.console_fixtures import EPOCH, recorded_run
from tests.console.test_attach import LiveRun, _start_run, events_of, pilot_wait
from tests.console.test_console_controls import ANSWER, REPORT, Live, is_, live, worker


def _notes_shown(app: App[Any]) -> list[str]:
    transcript = app.query_one(TranscriptPane)
    return [
        str(entry.line)
        for entry in transcript.query(NoteEntry)
        if isinstance(entry.key, tuple) and entry.key[0] == "annotation"
    ]


async def _type(run: Live, key: str, text: str) -> None:
    await _type_in(run.pilot, run.app, key, text)


async def _type_in(pilot: Pilot[Any], app: App[Any], key: str, text: str) -> None:
    await pilot.press(key)
    await pilot_wait(
        pilot,
        "the note's prompt",
        lambda: isinstance(app.screen, PromptScreen) and isinstance(app.focused, Input),
    )
    await pilot.press(*text, "enter")
    await pilot_wait(pilot, "the prompt gone", lambda: not isinstance(app.screen, PromptScreen))


async def test_keys_annotate_the_step_live_and_the_replay_finds_them(
    tmp_path: Path, answer_task: Path
) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        await run.watch.wait(is_(ev.ApprovalRequested))
        await run.shown(lambda app: app.state.phase == "awaiting_approval")
        run_dir = run.controller.run_dir
        await _type(run, "#", "suspicious shell")
        await run.pilot.press("plus")
        await _type(run, "c", "writes the answer blind")
        await run.shown(lambda app: len(_notes_shown(app)) == 3)
        shown = _notes_shown(run.app)
        await run.pilot.press("a")
        await run.finished()
    notes = read_annotations(run_dir)
    assert [(n.step, n.tags, n.rating, n.comment) for n in notes] == [
        (1, ["suspicious", "shell"], None, ""),
        (1, [], 1, ""),
        (1, [], None, "writes the answer blind"),
    ]
    assert all(n.who and n.ts > 0 for n in notes)
    assert "✎ step 1: #suspicious #shell" in shown[0] and "+1" in shown[1]
    assert "writes the answer blind" in shown[2]
    # The agent's record is as it was written: no note in it.
    log = (run_dir / EVENTS_FILE).read_text()
    assert "writes the answer blind" not in log and "suspicious" not in log
    assert oct((run_dir / ANNOTATIONS_FILE).stat().st_mode & 0o777) == "0o600"

    app = ReplayApp(ReplayModel.open(run_dir))
    async with app.run_test(size=(160, 48)) as pilot:
        model = app.model
        assert model.cursor == len(model.events) - 1  # a finished run opens at its end
        assert "3 notes" in str(app.query_one("#verdict", Static).content)
        await pilot.press("home")
        assert model.cursor == 0
        await pilot.press("o")  # to the first note: the worker's step 1
        assert model.position().step == 1 and model.cursor in model.marks["annotation"]
        assert any("#suspicious" in line for line in _notes_shown(app))
        await pilot.press("end")
        await pilot.press("O")
        assert model.position().step == 1
        await pilot.press("home", "slash")
        await pilot.press(*"answer blind", "enter")
        assert model.matches and model.cursor == model.marks["annotation"][0]
        # `r` rates the step under the cursor; the new note shows at once.
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, PromptScreen)
        await pilot.press(*"-1", "enter")
        await pilot.pause()
        assert any("-1" in line for line in _notes_shown(app))
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert {"tag", "comment", "rate_step", "next_mark('annotation')"} <= {
            k.action for k in app.screen.keys
        }
    assert [n.rating for n in read_annotations(run_dir)][-1] == -1


def test_snapshot_a_noted_step_80x24(snap_compare: Any, tmp_path: Path) -> None:
    """The replay at a step someone annotated, in the smallest terminal: the note's
    marker line (tags, rating, comment, who) closes the transcript."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    events = recorded_run("finished")
    (run_dir / EVENTS_FILE).write_text("".join(e.model_dump_json() + "\n" for e in events))
    step_7 = next(e for e in events if isinstance(e, ev.StepStarted) and e.step == 7)
    note = Annotation(
        id="0123456789ab",
        step=7,
        seq=step_7.seq,
        tags=["baseline"],
        rating=1,
        comment="measures before changing anything",
        who="ada@lab",
        ts=EPOCH,
    )
    append_annotation(run_dir, note)
    app = ReplayApp(ReplayModel.open(run_dir), at_step=7)
    assert snap_compare(app, terminal_size=(80, 24))


def test_the_attached_console_has_the_same_note_keys() -> None:
    """`mlra attach` opens a subclass of the console: its notes come from the same code."""
    from mlra.console.apps.attach_app import AttachApp

    actions = {getattr(b, "action", None) for b in AttachApp.BINDINGS}
    assert {"tag", "comment", "rate(1)", "rate(-1)"} <= actions
    assert AttachApp.action_tag is MlraApp.action_tag


def _lines_shown(app: App[Any]) -> list[str]:
    """The Worker pane's entries top to bottom, each as its first line."""
    return [str(entry.render()).split("\n")[0] for entry in app.query_one(TranscriptPane).children]


@pytest.fixture
def held_run(tmp_path: Path, answer_task: Path) -> Iterator[LiveRun]:
    yield from _start_run(tmp_path, answer_task)


async def test_an_attached_console_shows_a_note_under_its_steps_call_as_the_live_one_does(
    held_run: LiveRun,
) -> None:
    """A note on the worker's step 1 shows under that step's call line in an attached
    console, as in the console where it was made (under the call it is made on): one read
    from the file as the console attaches (the run's past is fed after the notes are read,
    and each showed where its step started, above the call), and one made there on that
    call, with the run at step 2."""
    events = events_of(held_run.run_dir)
    step_1 = next(e for e in events if isinstance(e, ev.StepStarted) and e.step == 1)
    append_annotation(held_run.run_dir, Annotation(step=1, seq=step_1.seq, tags=["before"]))
    app = AttachApp(RemoteRun(held_run.run_dir, name="notes"))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot_wait(
            pilot, "step 2 shown", lambda: "Now the slow part." in "".join(_lines_shown(app))
        )
        lines = _lines_shown(app)
        call = next(i for i, line in enumerate(lines) if "read_file question.txt" in line)
        assert lines[call - 1].endswith("Reading the question first.")
        assert "✎ step 1: #before" in lines[call + 1], lines
        entry = next(e for e in app.query_one(TranscriptPane).query(ToolEntry) if e.call.step == 1)
        entry.focus()
        await _type_in(pilot, app, "c", "read first")
        await pilot_wait(pilot, "the new note", lambda: len(_notes_shown(app)) == 2)
        lines = _lines_shown(app)
        assert "✎ step 1: #before" in lines[call + 1], lines
        assert "✎ step 1: read first" in lines[call + 2], lines
        assert "Now the slow part." in lines[call + 3], lines
    assert [n.step for n in read_annotations(held_run.run_dir)] == [1, 1]
    held_run.finish()
