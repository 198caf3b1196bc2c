"""The console's note keys: tag, comment on and rate a worker step, kept beside the
run's log in annotations.jsonl (agent/record/annotations.py) and shown in the transcript where
the step starts, with notes added from elsewhere (`mlra annotate`, another console)
picked up as the file grows.

Apart from the app (console/apps/app.py) because notes are the run folder's, not the run's:
they work the same on a live run and on a recorded one, and never reach the controller.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError
from textual.app import App
from textual.css.query import NoMatches

from mlra.agent.record.annotations import (
    ANNOTATIONS_FILE,
    Annotation,
    StepIndex,
    append_annotation,
    load_annotations,
    parse_rating,
    step_of_seq,
    who,
)
from mlra.agent.record.state import RunState
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.panes.transcript_entries import ToolEntry
from mlra.console.screens.screens import PromptScreen
from mlra.terminal_text import printable_line


class NoteKeys(App[int]):
    """The note actions of the console (a mixin of `MlraApp`, which sets these)."""

    run_dir: Path | None
    state: RunState
    _notes_size: int | None
    _step_index: StepIndex | None

    def _load_annotations(self) -> None:
        """The run's notes so far, for the transcript to show under their steps' lines."""
        if self.run_dir is None:
            return
        notes, _ = load_annotations(self.run_dir)
        self._notes_size = self._annotations_size()
        self.query_one(TranscriptPane).set_annotations(notes)

    def _annotations_size(self) -> int | None:
        try:
            return (Path(self.run_dir) / ANNOTATIONS_FILE).stat().st_size if self.run_dir else None
        except OSError:
            return None

    def _poll_annotations(self) -> None:
        """Show notes added from elsewhere (`mlra annotate`, another console) since the
        last look: one stat a second, the file read only when it grew."""
        size = self._annotations_size()
        if size == self._notes_size or self.run_dir is None:
            return
        self._notes_size = size
        try:
            transcript = self.query_one(TranscriptPane)
        except NoMatches:
            return
        for note in load_annotations(self.run_dir)[0]:
            transcript.add_annotation(note)  # those shown already stay as they are
        transcript.flush()

    def annotation_target(self) -> tuple[int, int] | None:
        """The (worker step, event seq) the note keys act on: the selected tool call's,
        else the newest worker step; None (and said) when there is none."""
        if self.run_dir is None:
            return None
        if self._step_index is None:
            self._step_index = StepIndex(Path(self.run_dir))
        try:
            steps = self._step_index.update()
        except OSError as exc:
            self.notify(f"cannot read the run's log: {exc}", severity="error", markup=False)
            return None
        focused = self.focused
        if isinstance(focused, ToolEntry) and focused.call.seq:
            step = step_of_seq(steps, focused.call.seq)
            if step is not None:
                return step, focused.call.seq
        if not steps:
            self.notify("no worker step yet to annotate", severity="warning")
            return None
        step = self.state.steps if self.state.steps in steps else max(steps)
        return step, steps[step]

    def add_note(self, target: tuple[int, int], **fields: Any) -> Annotation | None:
        """Keep a note on the step (annotations.jsonl, beside the log) and show it."""
        assert self.run_dir is not None
        step, seq = target
        try:
            note = Annotation(step=step, seq=seq, who=who(), **fields)
            append_annotation(Path(self.run_dir), note)
        except ValidationError as exc:
            self.notify(f"not kept: {exc.errors()[0]['msg']}", severity="error", markup=False)
            return None
        except (ValueError, OSError) as exc:
            self.notify(f"not kept: {exc}", severity="error", markup=False)
            return None
        self._notes_size = self._annotations_size()
        self.show_annotation(note)
        self.notify(f"step {step}: {printable_line(note.summary())}", timeout=3, markup=False)
        return note

    def show_annotation(self, note: Annotation) -> None:
        transcript = self.query_one(TranscriptPane)
        transcript.add_annotation(note)
        transcript.flush()

    def _ask_note(self, what: str) -> None:
        target = self.annotation_target()
        if target is None:
            return

        def done(text: str | None) -> None:
            if not text or not text.strip():
                return
            if what == "tag":
                self.add_note(target, tags=text.replace(",", " ").split())
            elif what == "comment":
                self.add_note(target, comment=text.strip())
            else:
                try:
                    rating = parse_rating(text)
                except ValueError as exc:
                    self.notify(str(exc), severity="error", markup=False)
                    return
                self.add_note(target, rating=rating)

        title, hint = {
            "tag": (f"Tag worker step {target[0]}", "one or more words, e.g. data-leak"),
            "comment": (f"Comment on worker step {target[0]}", "kept beside the run's log"),
            "rating": (f"Rate worker step {target[0]}", "+1 or -1"),
        }[what]
        self.push_screen(PromptScreen(title, hint), done)

    def action_tag(self) -> None:
        self._ask_note("tag")

    def action_comment(self) -> None:
        self._ask_note("comment")

    def action_rate(self, rating: int) -> None:
        target = self.annotation_target()
        if target is not None:
            self.add_note(target, rating=rating)
