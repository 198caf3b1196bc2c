"""People's notes on a run's steps: tags, comments and +1/-1 ratings.

They are kept beside the event log, in the run folder's `annotations.jsonl`, never
in it: `events.jsonl` is the agent's record as it was written (its numbering and
digest bind result.json to it), and a note added a week later is not part of what
the agent did. The run folder lies under the runs folder the sandbox is never shown
(agent/setup/run_setup.py hides it), so the agent can neither read nor forge a note.

The console (live and replay), `mlra annotate`, `mlra runs` and the batch report all
read and write through here. Each note is one JSON line appended with a single
`write` on a descriptor opened with O_APPEND, so a console and a command line adding
notes at the same moment never interleave; a line that does not parse (a disk that
filled mid-write, a hand edit) is skipped, not fatal, so one bad line never hides
the others.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mlra.agent.record.eventlog import EVENTS_FILE

ANNOTATIONS_FILE = "annotations.jsonl"
MAX_TAG_CHARS = 40
MAX_COMMENT_CHARS = 4000
"""A note stays one modest line: a single append of it is atomic in practice."""

Rating = Literal[1, -1]


class Annotation(BaseModel):
    """One person's note on one worker step.

    `step` is the worker step number as the console's transcript, `mlra replay --at`
    and the replay's "Go to" count them (a `step_started` event's `step`, any agent
    but the supervisor); `seq` is the event the note was made on (the step's start,
    or the event a replay's cursor or the console's selection was on)."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])
    step: int
    seq: int
    tags: list[str] = Field(default_factory=list)
    comment: str = ""
    rating: Rating | None = None
    who: str = ""
    """user@host of whoever made it."""
    ts: float = Field(default_factory=time.time)
    """Wall time it was made (seconds since the epoch)."""

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: list[str]) -> list[str]:
        return [check_tag(t) for t in tags]

    @field_validator("comment")
    @classmethod
    def _comment(cls, comment: str) -> str:
        if len(comment) > MAX_COMMENT_CHARS:
            raise ValueError(f"a comment is at most {MAX_COMMENT_CHARS} characters")
        return comment

    def is_empty(self) -> bool:
        return not self.tags and not self.comment.strip() and self.rating is None

    def text(self) -> str:
        """What a search looks in: its tags, comment and author."""
        return " ".join([*(f"#{t}" for t in self.tags), self.comment, self.who])

    def summary(self) -> str:
        """One line: `#tag · +1 · comment · who`."""
        parts = [" ".join(f"#{t}" for t in self.tags)] if self.tags else []
        if self.rating is not None:
            parts.append(f"{self.rating:+d}")
        if self.comment.strip():
            parts.append(" ".join(self.comment.split()))
        parts.append(self.who or "?")
        return " · ".join(parts)


def check_tag(tag: str) -> str:
    """A tag is one word (it is searched, counted and listed per run): ValueError if not."""
    tag = tag.strip().lstrip("#")
    if not tag:
        raise ValueError("a tag cannot be empty")
    if len(tag) > MAX_TAG_CHARS:
        raise ValueError(f"a tag is at most {MAX_TAG_CHARS} characters")
    if any(c.isspace() or not c.isprintable() for c in tag):
        raise ValueError(f"a tag is one word without spaces or control characters: {tag!r}")
    return tag


def parse_rating(text: str) -> Rating:
    """`+1`, `1`, `-1` (and `+`, `-`, `good`, `bad`): ValueError otherwise."""
    words: dict[str, Rating] = {"+1": 1, "1": 1, "+": 1, "good": 1, "-1": -1, "-": -1, "bad": -1}
    value = words.get(text.strip().lower().replace("−", "-"))
    if value is None:
        raise ValueError(f"a rating is +1 or -1, not {text!r}")
    return value


def who() -> str:
    """user@host, as a re-grade records who ran it."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def append_annotation(run_dir: Path, annotation: Annotation) -> None:
    """Add a note to the run folder's file: one write of one line, O_APPEND, so writers
    at the same moment (a console, `mlra annotate`) each land whole. OSError reaches
    the caller."""
    if annotation.is_empty():
        raise ValueError("nothing to annotate: give a tag, a comment or a rating")
    line = (annotation.model_dump_json() + "\n").encode()
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(run_dir / ANNOTATIONS_FILE, flags, 0o600)
    try:
        written = os.write(fd, line)
        if written != len(line):  # a full disk: the torn line is skipped on reading
            raise OSError(f"only {written} of {len(line)} bytes of the note were written")
    finally:
        os.close(fd)


def load_annotations(run_dir: Path) -> tuple[list[Annotation], int]:
    """The run's notes in the order they were made, and how many lines were skipped
    as damaged. A run without notes has none (no file is not an error)."""
    try:
        data = (run_dir / ANNOTATIONS_FILE).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return [], 0
    notes: list[Annotation] = []
    skipped = 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            notes.append(Annotation.model_validate_json(line))
        except (ValidationError, ValueError):
            skipped += 1
    return notes, skipped


def read_annotations(run_dir: Path) -> list[Annotation]:
    return load_annotations(run_dir)[0]


def tag_counts(notes: list[Annotation]) -> Counter[str]:
    return Counter(tag for note in notes for tag in note.tags)


def worker_steps(run_dir: Path) -> dict[int, int]:
    """Worker step number -> the `seq` of its first `step_started`, as the replay's
    "Go to" numbers them."""
    return StepIndex(run_dir).update()


class StepIndex:
    """`worker_steps` of a log that grows: each update reads only what was appended
    since the last (a console asks on every note key; a long run's log is tens of MB).

    Only the lines that start a step are parsed: inside any JSON string the key's quotes
    would be escaped, so the bare `"type":"step_started"` is only ever an event's own
    type. A line not yet ended is left for the next update."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / EVENTS_FILE
        self.offset = 0
        self.steps: dict[int, int] = {}

    def update(self) -> dict[int, int]:
        """The steps so far (OSError reaches the caller)."""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].split(b"\n"):
            if b'"type":"step_started"' not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("agent") == "supervisor":
                continue
            step, seq = event.get("step"), event.get("seq")
            if isinstance(step, int) and isinstance(seq, int):
                self.steps.setdefault(step, seq)
        return self.steps


def step_of_seq(steps: dict[int, int], seq: int) -> int | None:
    """The worker step an event lies in: the latest one started at or before it."""
    before = [(start, step) for step, start in steps.items() if start <= seq]
    return max(before)[1] if before else None
