"""`mlra replay`: a recorded run stepped through in the console, or printed headless up
to a step; the fork key's `mlra fork` once the replay has closed.

It reads only what a run folder holds and never writes to it. Imported only when
`mlra replay` is named (console/cli/cli.py's table); the Textual app alone is imported
inside the command, which `--no-tui` never needs. Bad input gets one line and exit
status 2; a damaged log is refused, not replayed. Apart from `mlra runs`
(console/cli/runs_cli.py), which lists runs rather than opening one.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from mlra import events as ev
from mlra.agent.record.annotations import read_annotations
from mlra.agent.record.eventlog import EVENTS_FILE, LogDamage, read_events
from mlra.console.cli.resume_cli import add_fork_command
from mlra.console.text.args import Parser, UsageError, dispatch, run_path
from mlra.console.text.headless import JsonDisplay, TranscriptDisplay
from mlra.console.text.replay import ReplayModel
from mlra.terminal_text import printable


def _step(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a step number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def add_replay_command(sub: Any) -> None:
    replay = sub.add_parser(
        "replay",
        description="Open the console over a recorded run, read-only: step through it event by "
        "event or step by step, with the plan, transcript, resources and files as they were.",
    )
    replay.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=str,
        help="a run folder (runs/<run-id>), or a run id in ./runs",
    )
    mode = replay.add_mutually_exclusive_group()
    mode.add_argument("--no-tui", action="store_true", help="print the transcript instead")
    mode.add_argument("--json", action="store_true", help="print the events as JSON lines")
    replay.add_argument(
        "--at",
        type=_step,
        metavar="STEP",
        help="open at the start of worker step STEP (headless: print from there on)",
    )
    replay.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="headless: command output and whole tool results too",
    )
    replay.add_argument(
        "--base-url",
        help="for the fork key (f): the OpenAI-compatible server the forked run talks to, "
        "as `mlra fork --base-url`",
    )
    replay.set_defaults(func=cmd_replay)


def _warn_torn_tail(note: str) -> None:
    sys.stderr.write(f"mlra: {printable(note)}\n")


def _load_events(run_dir: Path) -> list[Any]:
    log = run_dir / EVENTS_FILE
    if not log.is_file():
        raise UsageError(f"{run_dir} is not a run folder (no {EVENTS_FILE})")
    try:
        events = read_events(log, on_torn_tail=_warn_torn_tail)
    except LogDamage as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot read {log}: {exc.strerror}") from None
    if not events:
        raise UsageError(f"{log} holds no events")
    return events


def _open_model(run_dir: Path) -> Any:
    """The replay of a run folder; its events are parsed as the replay looks at them.

    A damaged log (a line missing, repeated or forged) is refused, not replayed:
    what a replay shows must be what the run did."""

    if not (run_dir / EVENTS_FILE).is_file():
        raise UsageError(f"{run_dir} is not a run folder (no {EVENTS_FILE})")
    try:
        return ReplayModel.open(run_dir, on_torn_tail=_warn_torn_tail)
    except LogDamage as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot read {run_dir / EVENTS_FILE}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"{run_dir / EVENTS_FILE}: {exc}") from None


def _start_of_step(events: list[Any], step: int) -> int:
    """The index of the event that starts worker step `step` (0: the run's first)."""

    starts = [
        (i, e.step)
        for i, e in enumerate(events)
        if isinstance(e, ev.StepStarted) and e.agent != "supervisor"
    ]
    if not step:
        return 0
    at = next((i for i, s in starts if s == step), None)
    if at is None:
        last = max((s for _, s in starts), default=0)
        raise UsageError(f"--at {step}: the run has no worker step {step} (it has 1–{last})")
    return at


def cmd_replay(args: argparse.Namespace) -> int:
    run_dir = run_path(args.run_dir)
    use_tui = not (args.no_tui or args.json) and sys.stdout.isatty() and sys.stdin.isatty()
    if use_tui:
        model = _open_model(run_dir)
    else:
        events = _load_events(run_dir)

        start = _start_of_step(events, args.at or 0)
        display = JsonDisplay() if args.json else TranscriptDisplay(verbose=args.verbose)
        notes_at: dict[int, list[Any]] = {}
        if isinstance(display, TranscriptDisplay):
            display.read_ahead(events, run_dir)  # a fork's header names the fork
            # People's notes (annotations.jsonl), each under the event it was made on,
            # as the replay console marks them in its transcript.
            for note in read_annotations(run_dir):
                notes_at.setdefault(note.seq, []).append(note)
        try:
            for i, event in enumerate(events):
                if isinstance(display, TranscriptDisplay):
                    # From `--at`'s step: the header, then what came before it folded unsaid.
                    if i == start and start:
                        display.from_step(args.at)
                    display.muted = 0 < i < start
                elif i < start:
                    continue
                display.on_event(event)
                if isinstance(display, TranscriptDisplay):
                    for note in notes_at.pop(event.seq, ()):
                        display.annotation(note)
            display.close()
        except BrokenPipeError:  # `mlra replay RUN --no-tui | head`: the reader has gone
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    # lazy: Textual, which --no-tui and --json never need
    from mlra.console.apps.replay_app import ReplayApp

    if args.at is not None and args.at not in model.worker_steps and args.at != 0:
        raise UsageError(
            f"--at {args.at}: the run has no worker step {args.at} (it has 1–{model.max_step})"
        )
    app = ReplayApp(model, at_step=args.at, freeze_gc=True)
    app.run()
    if app.fork_at is not None:
        return _fork(run_dir, app.fork_at, base_url=args.base_url)
    return 0


def _fork(run_dir: Path, step: int, base_url: str | None = None) -> int:
    """The fork key's errand: `mlra fork RUN_DIR --at STEP`, once the replay has closed."""

    argv = ["fork", str(run_dir), "--at", str(step)]
    if base_url:
        argv += ["--base-url", base_url]
    print(printable(f"mlra {' '.join(argv)}"), flush=True)
    parser = Parser(prog="mlra")
    add_fork_command(parser.add_subparsers(dest="command", parser_class=Parser))
    return dispatch(parser.parse_args(argv))
