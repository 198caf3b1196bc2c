"""`mlra replay` and `mlra runs`: looking back at recorded runs.

Both read only what a run folder holds (its event log, result.json, workspace
snapshots) and never write to it. Like the rest of the CLI, nothing heavy is
imported before a command runs, and bad input gets one line and exit status 2.
What a run's folder says (a task's name, a model's, a problem quoting the log) is
printed with its control characters escaped (mlra/terminal_text.py), and a table
cell is never read as Rich markup.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlra.terminal_text import printable, printable_line

STATUSES = ("finished", "stopped", "error", "running", "interrupted", "damaged")


def _step(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a step number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def add_replay_commands(sub: Any) -> None:
    replay = sub.add_parser(
        "replay",
        help="step through a recorded run",
        description="Open the console over a recorded run, read-only: step through it event by "
        "event or step by step, with the plan, transcript, resources and files as they were.",
    )
    replay.add_argument(
        "run_dir", metavar="RUN_DIR", type=Path, help="a run folder (runs/<run-id>)"
    )
    mode = replay.add_mutually_exclusive_group()
    mode.add_argument("--no-tui", action="store_true", help="print the transcript instead")
    mode.add_argument("--json", action="store_true", help="print the events as JSON lines")
    replay.add_argument(
        "--at",
        type=_step,
        metavar="STEP",
        help="open at the start of worker step STEP (headless: print up to the end of STEP)",
    )
    replay.add_argument("-v", "--verbose", action="store_true", help="headless: command output too")
    replay.add_argument(
        "--base-url",
        help="for the fork key (f): the OpenAI-compatible server the forked run talks to, "
        "as `mlra fork --base-url`",
    )
    replay.set_defaults(func=cmd_replay)

    runs = sub.add_parser(
        "runs",
        help="list the recorded runs",
        description="List the runs in a runs folder: id, task, model, status, why it ended, "
        "score, normalized score, the best validation score and the number of experiments "
        "(validations), the latest re-grade (mlra eval), duration, cost and the run each was "
        "forked from; for a run that searched (--search), a search column: attempts tried, "
        "the best validation, the submitted attempt and its validation-to-test gap.",
    )
    runs.add_argument(
        "--runs-dir", type=Path, default=Path("runs"), help="the runs folder (default ./runs)"
    )
    runs.add_argument("--task", help="only runs of this task (a part of its name)")
    runs.add_argument("--model", help="only runs of this model (a part of its name)")
    runs.add_argument("--status", choices=STATUSES, help="only runs with this status")
    runs.add_argument("--json", action="store_true", help="one JSON object per run")
    runs.set_defaults(func=cmd_runs)


# --- mlra replay ----------------------------------------------------------------------


def _warn_torn_tail(note: str) -> None:
    sys.stderr.write(f"mlra: {printable(note)}\n")


def _load_events(run_dir: Path) -> list[Any]:
    from mlra.agent.eventlog import EVENTS_FILE, LogDamage, read_events
    from mlra.console.args import UsageError

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
    from mlra.agent.eventlog import EVENTS_FILE, LogDamage
    from mlra.console.args import UsageError
    from mlra.console.replay import ReplayModel

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


def _end_of_step(events: list[Any], step: int) -> int:
    """The number of events up to the end of worker step `step`."""
    from mlra import events as ev
    from mlra.console.args import UsageError

    starts = [
        (i, e.step)
        for i, e in enumerate(events)
        if isinstance(e, ev.StepStarted) and e.agent != "supervisor"
    ]
    if step and not any(s == step for _, s in starts):
        last = max((s for _, s in starts), default=0)
        raise UsageError(f"--at {step}: the run has no worker step {step} (it has 1–{last})")
    after = next((i for i, s in starts if s > step), None)
    return len(events) if after is None else after


def cmd_replay(args: argparse.Namespace) -> int:
    from mlra.console.args import UsageError

    run_dir: Path = args.run_dir
    use_tui = not (args.no_tui or args.json) and sys.stdout.isatty() and sys.stdin.isatty()
    if use_tui:
        model = _open_model(run_dir)
    else:
        events = _load_events(run_dir)
        from mlra.console.headless import JsonDisplay, TranscriptDisplay

        end = _end_of_step(events, args.at) if args.at is not None else len(events)
        display = JsonDisplay() if args.json else TranscriptDisplay(verbose=args.verbose)
        if isinstance(display, TranscriptDisplay):
            display.read_ahead(events, run_dir)  # a fork's header names the fork
        try:
            for event in events[:end]:
                display.on_event(event)
            display.close()
        except BrokenPipeError:  # `mlra replay RUN --no-tui | head`: the reader has gone
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    from mlra.console.replay_app import ReplayApp

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
    from mlra.console.args import Parser, dispatch
    from mlra.console.resume_cli import add_resume_commands

    argv = ["fork", str(run_dir), "--at", str(step)]
    if base_url:
        argv += ["--base-url", base_url]
    print(printable(f"mlra {' '.join(argv)}"), flush=True)
    parser = Parser(prog="mlra")
    add_resume_commands(parser.add_subparsers(dest="command", parser_class=Parser))
    return dispatch(parser.parse_args(argv))


# --- mlra runs ------------------------------------------------------------------------


@dataclass
class RunRow:
    id: str
    task: str = ""
    model: str = ""
    status: str = "damaged"
    reason: str = ""
    """Why the run ended (`submitted`, `deadline`, `no_submission`, ...)."""
    score: float | None = None
    """The run's own score; a later `mlra eval` is a re-grade, shown beside it."""
    normalized_score: float | None = None
    success: bool | None = None
    success_bar: str | None = None
    """The task's success rule and its bar in words, as the grading recorded it."""
    self_reported: str | None = None
    """Why the score is the workspace's own report, not a measurement (marked `^`)."""
    duration_s: float | None = None
    tokens: int | None = None
    tokens_estimated: bool = False
    """Some of `tokens` (and the cost) are mlra's estimates, not the server's counts:
    shown "~4.5k"."""
    cost_usd: float | None = None
    forked_from: str | None = None
    annotations: int = 0
    """People's notes on the run's steps (annotations.jsonl, `mlra annotate`)."""
    run_dir: str = ""
    problem: str | None = None
    isolation: str | None = None
    """The sandbox isolation the run had; "none" makes its score unisolated."""
    result_mismatch: bool = False
    """result.json says other than its log (the log was rewritten, or the result
    edited): the row shows what the log says."""
    regrades: int = 0
    """How often the run was graded again after it ended (`mlra eval`)."""
    regrade_score: float | None = None
    """The latest re-grade's score, and what it graded (a workspace path, or the
    frozen submission again)."""
    regrade_artifact: str | None = None
    experiments: int = 0
    """Rows of the run's experiments table (one per validation)."""
    best_validation: float | None = None
    """The best validation score (the validation split, never the hidden test split)."""
    attempts: dict[str, Any] | None = None
    """A search's attempts as result.json has them (tried, validated, buggy, best,
    best_validation, submitted, submitted_validation, test_score, validation_to_test_gap);
    None for a run with one line of work."""
    graded_unsubmitted: bool = False
    """The graded attempt was not submitted: the run ended (a deadline, a budget, a stop)
    with nothing submitted and its best validated attempt was graded instead."""
    live: bool = False
    """Running and serving its controls now (control.sock answers): `mlra attach` and
    `mlra ctl` reach it. A running run that does not answer (killed, an older mlra) is
    not live."""

    @property
    def unisolated(self) -> bool:
        return self.isolation == "none"

    @property
    def running(self) -> bool:
        """Still going, or cut off before it ended: it has no ending yet."""
        return self.status in ("running", "interrupted")


_OUTCOME_TYPES = frozenset(
    {
        b"run_started",
        b"run_finished",
        b"run_resumed",
        b"run_forked",
        b"evaluation_started",
        b"evaluation_finished",
        b"submission",
        b"attempt_started",
        b"attempt_finished",
    }
)
_CLAIMS = (
    "run_id",
    "task",
    "model",
    "status",
    "reason",
    "metric",
    "score",
    "normalized_score",
    "success",
    "isolation",
    "forked_from",
    "resumed",
    "regrades",
    "attempts",
)
"""The fields of result.json a reader takes as the run's outcome; each must be what
the log says (a search's numbers too: an edited best validation or gap is caught)."""


def _check_claims(log: Path, data: bytes, result: Any) -> str | None:
    """Where result.json and its (unchanged) log disagree on the outcome, or None.

    A digest binds result.json to the log's bytes, not to what result.json says,
    so its outcome is checked against the log too. Only the few events the outcome
    comes from are parsed (a run's log can hold 100,000 events); the rest are
    checked for their numbering only (`check_lines`), so a listing stays quick.
    """
    from mlra.agent.eventlog import check_lines
    from mlra.agent.state import RunState, result_of
    from mlra.events import parse_event

    lines = data.split(b"\n")
    lines.pop()  # the torn tail, or b""
    state = RunState()
    for line in lines:
        if not line.strip():
            continue
        i = line.find(b'"type":"') + 8
        name = line[i : line.find(b'"', i)] if i >= 8 else b"?"
        if name in _OUTCOME_TYPES:
            state.apply(parse_event(line))
    check_lines(log, lines)
    derived = result_of(state)
    for name in _CLAIMS:
        claimed, actual = getattr(result, name), getattr(derived, name)
        if claimed != actual:
            return f"result.json says {name} {claimed!r}, the log {actual!r}"
    return None


def _isolation_of(log: Path) -> str | None:
    """The isolation its `run_started` (the log's first line) names, if it does."""
    from mlra import events as ev

    with open(log, "rb") as f:
        first = f.readline()
    try:
        started = ev.parse_event(first)
    except ValueError:  # pydantic's ValidationError is one
        return None
    return started.sandbox.isolation if isinstance(started, ev.RunStarted) else None


def run_row(run_dir: Path) -> RunRow:
    """One run's line; a run that cannot be read is listed as damaged, not raised.

    result.json is derived from the log and names the log's digest. A log that
    has grown since (a resume) wins over it; a log that is no longer the one the
    result was derived from, or a result that says other than its log, is marked
    `result≠log`, and the row shows what the log says.
    """
    from pydantic import ValidationError

    from mlra.agent.eventlog import EVENTS_FILE, LogDamage, log_is_live, read_events
    from mlra.agent.state import RunResult, fold, result_of

    row = RunRow(id=run_dir.name, run_dir=str(run_dir))
    row.annotations = _annotations(run_dir)
    log, result_file = run_dir / EVENTS_FILE, run_dir / "result.json"
    try:
        running = log_is_live(log)
        stored: RunResult | None = None
        use_result = False
        if result_file.is_file() and not running:
            stored = RunResult.model_validate_json(result_file.read_bytes())
            if not log.is_file():
                use_result = True
            elif stored.log_sha256 is None:  # written before results named their log
                use_result = result_file.stat().st_mtime >= log.stat().st_mtime
            else:
                data = log.read_bytes()
                size, bound = len(data), stored.log_size or 0
                if size == bound and hashlib.sha256(data).hexdigest() == stored.log_sha256:
                    problem = _check_claims(log, data, stored)
                    row.result_mismatch = problem is not None
                    row.problem = problem
                    use_result = problem is None
                elif size > bound and hashlib.sha256(data[:bound]).hexdigest() == stored.log_sha256:
                    pass  # appended to since (resumed, evaluated again): the log wins
                else:
                    row.result_mismatch = True
                    row.problem = "result.json was derived from another events.jsonl"
        if use_result and stored is not None:
            result = stored
            status = result.status
            if result.isolation is None and log.is_file():  # a result.json from before
                result.isolation = _isolation_of(log)
        else:
            state = fold(read_events(log))
            if not state.run_id and not state.task:
                raise ValueError("the log has no run_started event")
            result = result_of(state)
            status = (
                "running"
                if running
                else state.finished.status
                if state.finished is not None
                else "interrupted"
            )
    except (OSError, ValueError, ValidationError, LogDamage) as exc:
        row.status = "damaged"
        row.problem = str(exc).splitlines()[0][:200]
        return row
    row.task, row.model, row.status = result.task, result.model, status
    if status == "running":
        from mlra.control_socket import is_live

        row.live = is_live(run_dir)
    row.reason = "" if status in ("running", "interrupted") else result.reason
    row.score, row.normalized_score = result.score, result.normalized_score
    row.success, row.success_bar = result.success, result.success_bar
    row.self_reported = result.self_reported
    if result.regrades:
        latest = result.regrades[-1]
        row.regrades, row.regrade_score = len(result.regrades), latest.score
        row.regrade_artifact = latest.artifact
    row.duration_s, row.cost_usd = result.duration_s, result.cost_usd
    row.tokens, row.tokens_estimated = result.tokens, result.tokens_estimated
    row.forked_from = result.forked_from
    row.isolation = result.isolation
    row.experiments, row.best_validation = result.experiments, result.best_validation
    if result.attempts is not None:
        row.attempts = result.attempts.model_dump()
        row.graded_unsubmitted = graded_unsubmitted(result.reason, result.attempts.submitted)
    return row


def graded_unsubmitted(reason: str, submitted: str | None) -> bool:
    """Whether a search's graded attempt is its best validated one, graded because the run
    ended with nothing submitted (a submitted attempt ends the run as `submitted`)."""
    return submitted is not None and reason != "submitted"


def search_cell(
    attempts: dict[str, Any] | None, graded_best: bool = False, *, ended: bool = True
) -> str:
    """A search in a cell: `4 tried (1 buggy), best a2 0.7812, sub a2, gap -0.0123`. The
    gap is the submitted attempt's test score minus its validation score; a run still
    going (`ended` False) has submitted nothing yet, which is not said."""
    if attempts is None:
        return "-"
    a = attempts
    parts = [f"{a['tried']} tried" + (f" ({a['buggy']} buggy)" if a.get("buggy") else "")]
    if a.get("best") is not None and a.get("best_validation") is not None:
        parts.append(f"best {a['best']} {a['best_validation']:.4g}")
    else:
        parts.append("none validated")
    if a.get("submitted") is not None:
        parts.append(("graded best " if graded_best else "sub ") + str(a["submitted"]))
        if a.get("validation_to_test_gap") is not None:
            parts.append(f"gap {a['validation_to_test_gap']:+.3g}")
    elif ended:
        parts.append("none submitted")
    return ", ".join(parts)


def list_runs(runs_dir: Path) -> list[RunRow]:
    folders = sorted(
        p
        for p in runs_dir.iterdir()
        if p.is_dir() and ((p / "events.jsonl").exists() or (p / "result.json").exists())
    )
    return [run_row(p) for p in folders]


UNISOLATED = "*"
"""After a score earned without isolation (sandbox isolation "none")."""
SELF_REPORTED = "^"
"""After a score the workspace's own code wrote (the task's `metric.self_reported`)."""
MISMATCH = "result≠log"
LIVE = "(live)"
"""After a running run's status where it serves its controls (`mlra attach`, `mlra ctl`)."""


def _annotations(run_dir: Path) -> int:
    from mlra.agent.annotations import read_annotations

    try:
        return len(read_annotations(run_dir))
    except OSError:
        return 0


def _cells(row: RunRow, *, search: bool = False, notes: bool = False) -> list[str]:
    from mlra.counts import format_tokens
    from mlra.durations import format_duration

    reported = SELF_REPORTED if row.self_reported else ""
    mark = reported + (UNISOLATED if row.unisolated else "")
    about = "~" if row.tokens_estimated and row.cost_usd else ""
    cells = [
        row.id,
        row.task or "-",
        row.model or "-",
        MISMATCH
        if row.result_mismatch and row.status != "damaged"
        else f"{row.status} {LIVE}"
        if row.live
        else row.status,
        row.reason or "-",
        f"{row.score:.4g}{mark}" if row.score is not None else "-",
        f"{row.normalized_score:+.3f}{mark}" if row.normalized_score is not None else "-",
        f"{row.best_validation:.4g}" if row.best_validation is not None else "-",
        str(row.experiments) if row.experiments else "-",
        *(
            [search_cell(row.attempts, row.graded_unsubmitted, ended=not row.running)]
            if search
            else []
        ),
        "-" if row.success is None else ("yes" if row.success else "no") + reported,
        _regrade_cell(row),
        format_duration(row.duration_s) if row.duration_s is not None else "-",
        format_tokens(row.tokens, estimated=row.tokens_estimated)
        if row.tokens is not None
        else "-",
        f"{about}${row.cost_usd:.2f}" if row.cost_usd is not None else "-",
        row.isolation or "-",
        row.forked_from or "-",
        *([str(row.annotations) if row.annotations else "-"] if notes else []),
    ]
    return [printable_line(cell) for cell in cells]


def _regrade_cell(row: RunRow) -> str:
    if not row.regrades:
        return "-"
    score = f"{row.regrade_score:.4g}" if row.regrade_score is not None else "no score"
    if row.regrade_score is not None and row.self_reported:
        score += SELF_REPORTED  # graded by the same evaluator: the same report
    return f"{score} ({row.regrade_artifact})"  # escaped with the row's other cells


NOTES_HEADER = "notes"
"""The column a listing has when one of its runs has annotations (last)."""
SEARCH_HEADER = "search"
"""The column a listing has when one of its runs searched (after "exp.")."""
RIGHT_ALIGNED = frozenset(
    {
        "score",
        "normalized",
        "best val.",
        "exp.",
        "success",
        "re-graded",
        "duration",
        "tokens",
        "cost",
        NOTES_HEADER,
    }
)

HEADERS = [
    "id",
    "task",
    "model",
    "status",
    "reason",
    "score",
    "normalized",
    "best val.",
    "exp.",
    "success",
    "re-graded",
    "duration",
    "tokens",
    "cost",
    "isol.",
    "forked from",
]


def _headers(*, search: bool, notes: bool = False) -> list[str]:
    """The listing's columns: a search column only where a run searched, so a listing of
    runs with one line of work each reads as it always has."""
    headers = [*HEADERS, NOTES_HEADER] if notes else HEADERS
    if not search:
        return headers
    at = headers.index("exp.") + 1
    return [*headers[:at], SEARCH_HEADER, *headers[at:]]


def cmd_runs(args: argparse.Namespace) -> int:
    from mlra.console.args import UsageError

    runs_dir: Path = args.runs_dir
    if not runs_dir.is_dir():
        raise UsageError(f"{runs_dir} is not a folder of runs (see --runs-dir)")
    rows = list_runs(runs_dir)
    if args.task:
        rows = [r for r in rows if args.task.lower() in r.task.lower()]
    if args.model:
        rows = [r for r in rows if args.model.lower() in r.model.lower()]
    if args.status:
        rows = [r for r in rows if r.status == args.status]
    if args.json:
        for row in rows:
            print(json.dumps({**asdict(row), "unisolated": row.unisolated}))
        return 0
    if not rows:
        print(
            printable(f"no runs in {runs_dir}")
            + (" match" if args.task or args.model or args.status else "")
        )
        return 0
    search = any(r.attempts is not None for r in rows)
    notes = any(r.annotations for r in rows)
    headers = _headers(search=search, notes=notes)
    table = [_cells(r, search=search, notes=notes) for r in rows]
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        styles = {"finished": "green", "running": "cyan", "damaged": "red", "error": "red"}
        out = Table(box=None, header_style="bold", pad_edge=False, collapse_padding=True)
        for i, header in enumerate(headers):
            # On a narrow terminal the model and the fork source give way; the rest stay whole.
            widest = max(len(header), *(len(c[i]) for c in table))
            out.add_column(
                header,
                justify="right" if header in RIGHT_ALIGNED else "left",
                no_wrap=True,
                min_width=None if header in ("model", "forked from") else widest,
            )
        for row, cells in zip(rows, table, strict=True):
            style = "red" if row.result_mismatch else styles.get(row.status, "")
            out.add_row(*(Text(cell) for cell in cells), style=style)  # text, not markup
        console = Console()
        console.print(out)
        for line in _footnotes(rows):
            console.print(line, style="yellow", markup=False, highlight=False)
        return 0
    widths = [max(len(h), *(len(c[i]) for c in table)) for i, h in enumerate(headers)]
    for cells in [headers, *table]:
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    for line in _footnotes(rows):  # kept off stdout, which has one line per run
        sys.stderr.write(line + "\n")
    return 0


def _footnotes(rows: list[RunRow]) -> list[str]:
    notes = []
    if any(r.unisolated and r.score is not None for r in rows):
        notes.append(f"{UNISOLATED} unisolated: scored with sandbox isolation none")
    reported = sorted({(r.task, r.self_reported) for r in rows if r.self_reported})
    for task, why in reported:
        notes.append(f"{SELF_REPORTED} self-reported, not measured ({task}: {why})")
    bars = sorted({(r.task, r.success_bar) for r in rows if r.success_bar})
    if bars:
        notes.append(
            "success by the task's rule: " + "; ".join(f"{task}: {bar}" for task, bar in bars)
        )
    if any(r.tokens_estimated for r in rows):
        notes.append(
            "~ estimated: the server sent no token counts for some calls (or they were cut "
            "off); mlra counted four characters a token"
        )
    if any(r.attempts is not None for r in rows):
        notes.append(
            "search: attempts tried, the best validation (attempt, score), the graded attempt "
            "(sub: submitted; graded best: nothing was submitted, so the best validated one "
            "was graded) and its gap, test score minus validation score"
        )
    if any(r.live for r in rows):
        notes.append(
            f"{LIVE}: the run answers on its control socket: mlra attach ID watches and "
            "steers it, mlra ctl ID status|pause|stop... acts on it"
        )
    if any(r.regrades for r in rows):
        notes.append(
            "re-graded: the latest `mlra eval` of the run (and what it graded); "
            "score is the run's own"
        )
    if any(r.annotations for r in rows):
        notes.append("notes: annotations of the run's steps (`mlra annotate ID` lists them)")
    for row in rows:
        if row.result_mismatch:
            notes.append(f"{row.id}: {MISMATCH}: {row.problem}")
    return [printable_line(note) for note in notes]
