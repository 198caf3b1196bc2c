"""`mlra compare RUN... [--metric M] [--x step|time]`: runs side by side, in a console
screen (console/screens/compare_screen.py) or, with `--no-tui` (or no terminal), as text
tables that fit the terminal (console/text/compare_text.py), or JSON (`--json`).

A RUN is a run folder, a run's id in the runs folder (`--runs-dir`, default ./runs),
a batch folder (its runs) or a folder of runs. Bad input (no such run, fewer than two
runs, a metric no run has) gets one line and exit status 2. The comparison itself is
batch/compare/ (pure functions over the runs' logs).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from mlra.batch.compare import matrix, paired
from mlra.batch.compare.runs import CompareError, expand, load_all
from mlra.console.text.args import UsageError, find_run
from mlra.console.text.compare_text import as_json, matrix_text, paired_text
from mlra.terminal_text import printable_line


def add_compare_command(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        description="Compare runs side by side: a matrix with a column a run (status, task, "
        "model, the score and its verdict with the best starred, a search's attempts tried and "
        "how they ended, time, tokens, cost, and the run settings that differ), a paired table where "
        "two models (or two settings) ran the same tasks, the runs' curves overlaid, and the "
        "diffs of two runs' submitted files, prompts and settings. A RUN is a run folder, a "
        "run id in --runs-dir, a batch folder or a folder of runs (each of its runs).",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="runs, batch folders or run ids")
    p.add_argument("--metric", help="compare this metric (a grading's, validation's or curve's)")
    p.add_argument(
        "--x", choices=("step", "time"), default="time", help="the curves' axis (default time)"
    )
    p.add_argument(
        "--all", action="store_true", help="show every setting, not only those that differ"
    )
    p.add_argument(
        "--runs-dir", type=Path, default=None, help="where run ids are looked up (default ./runs)"
    )
    p.add_argument(
        "--no-tui",
        action="store_true",
        help="print the tables as text instead of the screen (as piped: no curves or diffs)",
    )
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    runs_dir: Path = args.runs_dir or Path("runs")
    try:
        runs = load_all(expand([find_run(n, runs_dir, folders=True) for n in args.runs]))
        table = matrix.build(runs, args.metric, all_settings=args.all)
    except CompareError as exc:
        raise UsageError(printable_line(str(exc))) from None
    tables = paired.paired(runs, args.metric)
    if args.json:
        print(json.dumps(as_json(table, tables), indent=2, ensure_ascii=True))
        return 0
    if not args.no_tui and sys.stdout.isatty() and sys.stdin.isatty():
        # lazy: Textual, which --no-tui, --json and a pipe never need
        from mlra.console.screens.compare_screen import CompareApp

        CompareApp(runs, metric=args.metric, x=args.x, all_settings=args.all).run()
        return 0

    width = shutil.get_terminal_size((80, 24)).columns
    parts = [matrix_text(table, width)] + [paired_text(t, width) for t in tables]
    # The description promises curves and diffs: said where they are, not silently left out.
    parts.append(TEXT_LEAVES_OUT)
    print("\n\n".join(parts))
    return 0


TEXT_LEAVES_OUT = "the curves and diffs are on the screen only (a terminal, no --no-tui)"
"""The text tables' last line: piped, the comparison is its tables alone."""
