"""Annotating steps from the consoles: keys in the live console (on a live scripted run,
through Textual's pilot) and in the replay of the same run, which jumps between the
notes and finds them by search. The notes are kept beside the log, never in it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import App
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
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.panes.transcript_entries import NoteEntry
from mlra.console.screens.screens import HelpScreen, PromptScreen
from mlra.console.text.replay import ReplayModel
from tests.console.console_fixtures import EPOCH, recorded_run
from tests.console.test_console_controls import ANSWER, REPORT, Live, is_, live, worker


def _notes_shown(app: App[Any]) -> list[str]:
    transcript = app.query_one(TranscriptPane)
    return [
        str(entry.line)
        for entry in transcript.query(NoteEntry)
        if isinstance(entry.key, tuple) and entry.key[0] == "annotation"
    ]


async def _type(run: Live, key: str, text: str) -> None:
    await run.pilot.press(key)
    await run.shown(
        lambda app: isinstance(app.screen, PromptScreen) and isinstance(app.focused, Input)
    )
    await run.pilot.press(*text, "enter")
    await run.shown(lambda app: not isinstance(app.screen, PromptScreen))


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
