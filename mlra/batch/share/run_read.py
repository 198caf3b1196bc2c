"""One pass over a run's log: the run's state, its curves and its log's digest, and its
transcript and plan fed to their writers as each event is read.

Read line by line up to its size when sharing began: a run still going is shared as it
is now (a half-written last line is left out) and its bytes' SHA-256 is the one the page
names. Each event is folded as `mlra runs` and result.json fold it (agent/record/state.py), so
the page's header says what they say. Logs from older mlra read as the typed reader reads
them (missing fields take their defaults, unknown events are kept as unknown); a line
that is not an event is counted and left out, not fatal.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mlra import events as ev
from mlra.agent.record.annotations import read_annotations
from mlra.agent.record.eventlog import EVENTS_FILE, log_is_live
from mlra.agent.record.log_refs import Resolver, Unresolved
from mlra.agent.record.run_result import RunResult, listed_status, result_of
from mlra.agent.record.state import RunState
from mlra.batch.share.attempt_curves import AttemptCurves, read_attempt_curves
from mlra.batch.share.curves_svg import Curves
from mlra.batch.share.transcript import PlanChanges, Transcript
from mlra.batch.task_labels import label_beside

STREAMED = frozenset({b"text_delta", b"tool_output", b"model_answering"})
"""Events only a live display needs (the text a model is writing, a command's output as it
comes): the whole text is in the thought or result that follows, so they are not parsed.
A long run's log is mostly these; skipping them reads it several times faster."""


class NotARun(ValueError):
    """The folder holds no run log: one line for the user."""


@dataclass
class RunRead:
    """What one pass over a run's log gathered."""

    run_dir: Path
    state: RunState
    result: RunResult
    status: str
    sha256: str
    size: int
    curves: Curves
    bad_lines: int = 0
    torn_tail: int = 0
    notes: list[Any] = field(default_factory=list)
    attempts: AttemptCurves = field(default_factory=AttemptCurves)
    """A search's attempts' curves, read from their own logs (attempt_curves.py)."""
    recorded_by: str = ""
    """The mlra version that started the run (`run_started`; empty from before it was said)."""
    task: str = ""
    """Its task as `mlra runs` lists it among the runs beside it: its name, or where one of
    them ran another task of that name, the end of its folder's path (`mlrc/answer`)."""


def _event_type(line: bytes) -> bytes:
    """The type a log line names in its stamps (where `EventLog` writes it, first)."""
    i = line.find(b'"type":"', 0, 160)
    if i < 0:
        return b""
    i += 8
    return line[i : line.find(b'"', i, i + 48)]


def read_run(
    run_dir: Path,
    transcript: Transcript | None,
    plan: PlanChanges | None,
    *,
    limit: int | None = None,
) -> RunRead:
    """Read the log once, feeding the transcript and plan writers as it goes."""
    log = run_dir / EVENTS_FILE
    if not log.is_file():
        raise NotARun(f"{run_dir} is not a run folder (no {EVENTS_FILE})")
    running = log_is_live(log)
    state, curves, resolve = RunState(), Curves(), Resolver()
    digest = hashlib.sha256()
    bad = torn = 0
    recorded_by = ""
    with open(log, "rb") as f:
        left = limit if limit is not None else log.stat().st_size
        while left > 0:
            line = f.readline(min(left, 1 << 30))
            if not line:
                break
            left -= len(line)
            if not line.endswith(b"\n"):
                torn = len(line)  # being written now, or cut off: never shown to anyone
                break
            digest.update(line)
            if not line.strip() or _event_type(line) in STREAMED:
                continue
            try:
                event = resolve(ev.parse_event(line))
            except (ValidationError, ValueError, Unresolved):
                bad += 1
                continue
            state.apply(event)
            if isinstance(event, ev.RunStarted) and not recorded_by:
                recorded_by = event.mlra_version or "an mlra that did not record its version"
            if isinstance(event, ev.Metrics):
                curves.feed(event)
            elif isinstance(event, ev.PlanUpdated):
                if plan is not None:
                    plan.feed(event)
            elif transcript is not None:
                transcript.feed(event)
    if not state.run_id and not state.task:
        raise NotARun(f"{log} has no run_started event")
    result = result_of(state, running=running)
    status = listed_status(state, running)
    size = (limit if limit is not None else log.stat().st_size) - left - torn
    read = RunRead(run_dir, state, result, status, digest.hexdigest(), size, curves, bad, torn)
    read.recorded_by = recorded_by
    read.task = label_beside(run_dir) or result.task
    if state.attempts.nodes:
        read.attempts = read_attempt_curves(run_dir, state)
    try:
        read.notes = read_annotations(run_dir)
    except (OSError, ValueError):
        read.notes = []
    return read
