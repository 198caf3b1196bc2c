"""The Worker pane's entries in their order, and where people's notes on the worker's
steps (annotations) go among them.

A note shows under its step's line (the step's tool call, with what it printed), however
the pane came to it: the live console, where a note is made once the call is there; an
attached console or a resumed run's, which read the notes before the log's past is fed
to them (each note, marked where its step started, showed above the step's call there,
under it in the console it was made in); a replay, rebuilt from the log. Where the step's
call has not come yet (a replay's cursor at the step's start, a note made while the
model answers), the note shows at the end meanwhile, and the call takes it under its line.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Unpack

from textual.containers import VerticalScroll

from mlra.agent.record.annotations import Annotation
from mlra.console.panes import WidgetOptions
from mlra.console.panes.transcript_entries import Entry, NoteEntry, annotation_line, taken_over


class NotedEntries(VerticalScroll):
    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self._new: list[Entry] = []
        """Entries not mounted yet (in order, mounted at the next flush)."""
        self._dirty: set[Entry] = set()
        self._entries: deque[Entry] = deque()
        self._notes: dict[int, list[Annotation]] = {}
        """People's annotations by worker step."""
        self._noted: dict[str, NoteEntry] = {}
        """The annotations shown (by id), each once, and their lines."""
        self._step_calls: dict[int, Entry] = {}
        """Each worker step's call line shown: its notes go under it."""

    # --- entries --------------------------------------------------------------------

    def _add(self, entry: Entry) -> None:
        self._new.append(entry)
        self._entries.append(entry)
        self._dirty.add(entry)

    def _drop(self, entry: Entry) -> None:
        if entry in self._entries:
            self._entries.remove(entry)
        self._dirty.discard(entry)
        if entry in self._new:
            self._new.remove(entry)
        elif entry.parent is self:
            entry.remove()

    def _place_under(self, above: Entry, entry: Entry) -> None:
        """`entry` under `above` and the notes already under it (in the order made)."""
        i = self._entries.index(above) + 1
        while i < len(self._entries) and _is_note(self._entries[i]):
            i += 1
        previous = self._entries[i - 1]
        self._entries.insert(i, entry)
        self._dirty.add(entry)
        if previous in self._new:
            self._new.insert(self._new.index(previous) + 1, entry)
        elif previous.parent is self:
            self.mount(entry, after=previous)
        else:
            self._new.append(entry)

    # --- annotations ----------------------------------------------------------------

    def set_annotations(self, notes: Iterable[Annotation]) -> None:
        """The run's annotations, each shown under its step's line as the step is fed."""
        self._notes = {}
        for note in notes:
            self._notes.setdefault(note.step, []).append(note)

    def add_annotation(self, note: Annotation) -> None:
        """One made now (or read from the file since): kept for its step and shown at
        once, under its step's line where that is shown, else at the end."""
        if note.id not in {n.id for n in self._notes.get(note.step, [])}:
            self._notes.setdefault(note.step, []).append(note)
        self._mark(note)

    def _mark(self, note: Annotation) -> None:
        if note.id in self._noted:
            return
        entry = NoteEntry(annotation_line(note), ("annotation", note.id))
        self._noted[note.id] = entry
        call = self._step_calls.get(note.step)
        if call is not None and call in self._entries:
            self._place_under(call, entry)
        else:
            self._add(entry)

    def _step_started(self, step: int) -> None:
        """The step's notes, at the end: what the step does comes below them until its
        call takes them under its line (a replay's cursor at the step's start shows them)."""
        for note in self._notes.get(step, ()):
            self._mark(note)

    def _step_called(self, step: int, call: Entry) -> None:
        """The step's first call line is shown: its notes go under it, those shown at the
        step's start moving there."""
        if step in self._step_calls:
            return
        self._step_calls[step] = call
        for note in self._notes.get(step, ()):
            early = self._noted.pop(note.id, None)
            if early is not None:
                self._drop(early)
            self._mark(note)

    def _forget_notes(self) -> None:
        """Show no note yet (a rebuild feeds the steps again); the notes are kept."""
        self._noted.clear()
        self._step_calls.clear()

    def _notes_taken_over(self, swapped: Mapping[int, Entry]) -> None:
        """After a rebuild: the widgets that now show the notes and the call lines."""
        self._step_calls = {step: taken_over(e, swapped) for step, e in self._step_calls.items()}
        self._noted = {i: taken_over(e, swapped) for i, e in self._noted.items()}


def _is_note(entry: Entry) -> bool:
    return isinstance(entry.key, tuple) and entry.key[0] == "annotation"
