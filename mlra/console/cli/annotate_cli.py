"""`mlra annotate RUN`: tag, comment on and rate a run's steps, list them, export them.

Notes go to the run folder's annotations.jsonl (agent/record/annotations.py), never to its
event log, so a live run (its log held by its own process) can be annotated as well
as a finished one. Bad input (no such run or step, a rating that is not ±1, a note
with nothing in it) gets one line and exit status 2. Whatever a note holds is printed
with its control characters escaped: notes are people's text, but a pasted one may
carry anything.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mlra.agent.record.annotations import (
    Annotation,
    append_annotation,
    load_annotations,
    parse_rating,
    who,
    worker_steps,
)
from mlra.console.text.args import UsageError, run_folder
from mlra.terminal_text import printable, printable_line


def _rating(text: str) -> int:
    try:
        return parse_rating(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_annotate_command(sub: Any) -> None:
    p = sub.add_parser(
        "annotate",
        description="Tag, comment on and rate (+1/-1) a worker step of a run, live or "
        "finished: `mlra annotate RUN --step N --tag T --comment C --rating +1`. Without "
        "--step, list the run's notes (--json: one JSON object per note, every field). "
        "Notes are kept in the run folder's annotations.jsonl, beside its event log, which "
        "stays as the agent wrote it.",
    )
    p.add_argument("run", metavar="RUN", help="a run folder, or a run id under --runs-dir")
    p.add_argument(
        "--runs-dir", type=Path, default=Path("runs"), help="where run ids are (default ./runs)"
    )
    p.add_argument(
        "--step",
        type=int,
        metavar="N",
        help="the worker step, as the console's transcript and `mlra replay --at` number them",
    )
    p.add_argument("--tag", action="append", default=[], metavar="T", help="a tag (repeatable)")
    p.add_argument("--comment", metavar="C", help="a comment")
    p.add_argument("--rating", type=_rating, metavar="±1", help="+1 or -1")
    p.add_argument("--json", action="store_true", help="print the notes as JSON lines")
    p.set_defaults(func=cmd_annotate)


def cmd_annotate(args: argparse.Namespace) -> int:
    run_dir = run_folder(args.run, args.runs_dir)
    adding = bool(args.tag) or args.comment is not None or args.rating is not None
    if args.step is None:
        if adding:
            raise UsageError("--tag, --comment and --rating annotate a step: give --step N")
        notes, skipped = load_annotations(run_dir)
        if skipped:
            sys.stderr.write(f"mlra: skipped {skipped} damaged line(s) of the annotations\n")
        for note in notes:
            if args.json:
                print(json.dumps(note.model_dump(), ensure_ascii=True))
            else:
                print(printable_line(f"step {note.step:>4}  {_when(note.ts)}  {note.summary()}"))
        if not notes and not args.json:
            print(printable(f"{run_dir.name}: no annotations"))
        return 0
    if not adding:
        raise UsageError(
            f"nothing to annotate step {args.step} with: give --tag, --comment or --rating"
        )
    steps = _steps(run_dir)
    if args.step not in steps:
        last = max(steps, default=0)
        have = f"it has 1–{last}" if last else "it has none yet"
        raise UsageError(f"--step {args.step}: the run has no worker step {args.step} ({have})")

    try:
        note = Annotation(
            step=args.step,
            seq=steps[args.step],
            tags=args.tag,
            comment=args.comment or "",
            rating=args.rating,
            who=who(),
        )
    except ValueError as exc:  # pydantic's ValidationError is one
        raise UsageError(_first_problem(exc)) from None
    if note.is_empty():
        raise UsageError("nothing to annotate: the tag, comment and rating are all empty")
    try:
        append_annotation(run_dir, note)
    except OSError as exc:
        raise UsageError(f"cannot write the annotation in {run_dir}: {exc}") from None
    if args.json:
        print(json.dumps(note.model_dump(), ensure_ascii=True))
    else:
        print(printable_line(f"annotated step {note.step} of {run_dir.name}: {note.summary()}"))
    return 0


def _steps(run_dir: Path) -> dict[int, int]:
    try:
        return worker_steps(run_dir)
    except OSError as exc:
        raise UsageError(f"cannot read {run_dir}: {exc.strerror}") from None


def _first_problem(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        return str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
    return str(exc)


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")
