"""`mlra runs`: the recorded runs in a table (or JSON lines), one row a run.

It reads only what a run folder holds and never writes to it; how one folder becomes a
row (its result checked against its log) is console/text/run_rows.py, and `mlra replay`,
the other way of looking back at a run, is console/cli/replay_cli.py. Imported only
when `mlra runs` is named (console/cli/cli.py's table); Rich alone waits for the table
that needs it. Bad input gets one line and exit status 2.
What a run's folder says (a task's name, a model's, a problem quoting the log) is
printed with its control characters escaped (mlra/terminal_text.py), and a table
cell is never read as Rich markup.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mlra.console.cli.compare_cli import cmd_compare
from mlra.console.text.args import UsageError
from mlra.console.text.run_columns import (
    NOTES_HEADER,
    SEARCH_HEADER,
    fit_columns,
    table_width,
)
from mlra.console.text.run_footnotes import LIVE, MISMATCH, SELF_REPORTED, UNISOLATED, footnotes
from mlra.console.text.run_rows import (
    RunRow,
    budget_cell,
    list_runs,
    search_cell,
    short_search_cell,
)
from mlra.counts import format_tokens
from mlra.durations import format_duration
from mlra.scores import format_normalized
from mlra.terminal_text import printable, printable_line

STATUSES = ("finished", "stopped", "error", "running", "interrupted", "damaged")


def _sort_key(field: str) -> Any:
    """A row's key for `--sort FIELD`, with the order's direction built in (first wanted
    first) and runs without the field last."""

    def number(get: Any, *, high_first: bool) -> Any:
        def key(row: RunRow) -> tuple[bool, float]:
            value = get(row)
            if value is None:
                return (True, 0.0)
            return (False, -value if high_first else value)

        return key

    texts = {"id": "id", "task": "task", "model": "model", "status": "status"}
    if field in texts:
        return lambda row: (getattr(row, texts[field]) or "~").lower()
    if field == "score":
        return _score_key
    getters = {
        "score": lambda r: r.score,
        "normalized": lambda r: r.normalized_score,
        "started": lambda r: r.started,
        "time": lambda r: r.duration_s,
        "cost": lambda r: r.cost_usd,
        "tokens": lambda r: r.tokens,
    }
    return number(getters[field], high_first=True)


def _score_key(row: RunRow) -> tuple[str, bool, float]:
    """Each task's runs together, the best first by the score's own direction: two tasks'
    scores are no one scale (a 0.81 on a two-label task above a 0.59 on an eight-label
    one, and `--compare 3` took the "three best" across tasks), and a lower-is-better
    score's worst came first. `--sort normalized` ranks across tasks."""
    if row.score is None:
        return (row.task.lower(), True, 0.0)
    return (row.task.lower(), False, row.score if row.higher_is_better is False else -row.score)


SORTS = (
    "id",
    "task",
    "model",
    "status",
    "score",
    "normalized",
    "started",
    "time",
    "cost",
    "tokens",
)


def add_runs_command(sub: Any) -> None:
    runs = sub.add_parser(
        "runs",
        description="List the runs in a runs folder: id, task, model, status, why it ended, "
        "score, normalized score, the best validation score and the number of experiments "
        "(validations), the latest re-grade (mlra eval), duration, cost, the run's use of its "
        "budget (memory while it runs, disk) and the run each was forked from; for a run that searched (--search), a search column: attempts tried "
        "and how they ended, the best validation, the submitted attempt and its validation-to-test gap.",
    )
    runs.add_argument(
        "--runs-dir",
        type=Path,
        default=None,
        help="the runs folder (default ./runs), or a batch folder (its runs)",
    )
    runs.add_argument(
        "--task", help="only runs of this task (a part of its name as listed: mlrc/answer)"
    )
    runs.add_argument("--model", help="only runs of this model (a part of its name)")
    runs.add_argument("--status", choices=STATUSES, help="only runs with this status")
    runs.add_argument(
        "--sort",
        choices=sorted(SORTS),
        help="order the runs by this field: score best first within each task (by its "
        "direction; two tasks' scores are no one scale), normalized (across tasks) and "
        "started best or newest first; time (duration), cost and tokens largest first; the "
        "rest A to Z (default: by id)",
    )
    runs.add_argument("--reverse", action="store_true", help="the --sort order reversed")
    runs.add_argument("--json", action="store_true", help="one JSON object per run")
    runs.add_argument(
        "--compare",
        nargs="?",
        type=int,
        const=COMPARED_MAX,
        metavar="N",
        help="open `mlra compare` over the runs listed (picked with --task, --model, "
        f"--status and --sort): the first N, at most {COMPARED_MAX} (the default)",
    )
    runs.set_defaults(func=cmd_runs)


COMPARED_MAX = 10
"""The most runs `mlra compare` puts side by side."""


def _cells(
    row: RunRow, *, search: bool = False, notes: bool = False, short: bool = False
) -> list[str]:
    reported = SELF_REPORTED if row.self_reported else ""
    mark = reported + (UNISOLATED if row.unisolated else "")
    about = "~" if row.tokens_estimated and row.cost_usd else ""
    cells = [
        row.id,
        row.task or "-",
        model_cell(row.model) + (" (worker alone)" if row.worker_alone else ""),
        MISMATCH
        if row.result_mismatch and row.status != "damaged"
        else f"{row.status} {LIVE}"
        if row.live
        else row.status,
        row.reason or "-",
        f"{row.score:.4g}{mark}" if row.score is not None else "-",
        format_normalized(row.normalized_score) + mark if row.normalized_score is not None else "-",
        f"{row.best_validation:.4g}" if row.best_validation is not None else "-",
        str(row.experiments) if row.experiments else "-",
        *(
            [
                (short_search_cell if short else search_cell)(
                    row.attempts, row.graded_unsubmitted, ended=not row.running
                )
            ]
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
        budget_cell(row),
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
    "budget",
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
    runs_dir: Path = args.runs_dir or Path("runs")
    if args.runs_dir is None and not runs_dir.exists():
        # The first thing a newcomer may try: nothing has run here yet, which is no error.
        if not args.json:
            print("no runs yet: ./runs does not exist (mlra run makes it; see --runs-dir)")
        return 0
    if not runs_dir.is_dir():
        raise UsageError(f"{runs_dir} is not a folder of runs (see --runs-dir)")
    if (runs_dir / "batch.json").is_file() and (runs_dir / "runs").is_dir():
        # A batch folder, as `mlra report`, `compare` and `export` take one: its runs.
        runs_dir = runs_dir / "runs"
    rows = list_runs(runs_dir)
    if args.task:
        rows = [r for r in rows if args.task.lower() in r.task.lower()]
    if args.model:
        rows = [r for r in rows if args.model.lower() in r.model.lower()]
    if args.status:
        rows = [r for r in rows if r.status == args.status]
    if args.sort:
        rows.sort(key=_sort_key(args.sort))
    if args.reverse:
        rows.reverse()
    if args.compare is not None:
        return _compare(rows, runs_dir, args.compare)
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
    tty = sys.stdout.isatty()
    width = _width(tty)
    # Too wide: a search's cell in its narrow form first (tens of characters less).
    short = search and width is not None and table_width(headers, table) > width
    if short:
        table = [_cells(r, search=search, notes=notes, short=True) for r in rows]
    legend = footnotes(rows, short_search=short)
    if width is not None:
        every = headers
        headers, table = fit_columns(headers, table, width)
        if left_out := [h for h in every if h not in headers]:
            # A column's own legend goes with it ("search: ...", "budget: ...").
            legend = [line for line in legend if line.split(":")[0] not in left_out]
            legend.append(
                f"left out at {width} columns: {', '.join(left_out)} (a wider terminal, "
                "or --json, shows them)"
            )
    if tty:
        # lazy: Rich, for a terminal's table only (a pipe and --json get plain lines)
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        styles = {"finished": "green", "running": "cyan", "damaged": "red", "error": "red"}
        out = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 1))
        for i, header in enumerate(headers):
            widest = max(len(header), *(len(c[i]) for c in table))
            out.add_column(
                header,
                justify="right" if header in RIGHT_ALIGNED else "left",
                no_wrap=True,
                min_width=widest,
            )
        for row, cells in zip(rows, table, strict=True):
            style = "red" if row.result_mismatch else styles.get(row.status, "")
            out.add_row(*(Text(cell) for cell in cells), style=style)  # text, not markup
        console = Console()
        console.print(out)
        for line in legend:
            console.print(line, style="yellow", markup=False, highlight=False)
        return 0
    widths = [max(len(h), *(len(c[i]) for c in table)) for i, h in enumerate(headers)]
    for cells in [headers, *table]:
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    # The legend is kept off stdout (a pipe or a file gets the table, one line a run, as
    # report's stdout is report.md's text) and said after the table, whose lines a pipe
    # holds back until flushed: `mlra runs 2>&1` printed the legend first.
    sys.stdout.flush()
    for line in legend:
        sys.stderr.write(line + "\n")
    return 0


def _compare(rows: list[RunRow], runs_dir: Path, n: int) -> int:
    """`mlra compare` over the first `n` of the runs listed, as if each were named."""

    if not 2 <= n <= COMPARED_MAX:
        raise UsageError(f"--compare N: N must be 2 to {COMPARED_MAX}, not {n}")
    picked = rows[:n]
    if len(picked) < 2:
        raise UsageError(
            f"--compare: {len(picked)} run listed; pick at least two (--task, --model, --status)"
        )
    names = [str(runs_dir / row.id) for row in picked]
    compare = argparse.Namespace(
        runs=names, metric=None, x="time", all=False, runs_dir=runs_dir, no_tui=False, json=False
    )
    return cmd_compare(compare)


RUN_HASH = re.compile(r"-([0-9a-f]{16})$")


def model_cell(model: str | None) -> str:
    """The model as the table shows it: `replay:RUN_DIR` as `replay:` and the run's
    hash, which ends its id in the id column (`--json` has the whole spec)."""
    if not model:
        return "-"
    if not model.startswith("replay:"):
        return model
    path = Path(model.removeprefix("replay:"))
    attempt = f"/attempts/{path.name}" if path.parent.name == "attempts" else ""
    run = path.parent.parent if attempt else path
    found = RUN_HASH.search(run.name)
    return f"replay:{found[1] if found else run.name}{attempt}"


def _width(tty: bool) -> int | None:
    """The width the table must fit on a terminal (COLUMNS where it is set); a pipe gets
    every column, since a script reads them all."""

    return shutil.get_terminal_size().columns if tty else None
