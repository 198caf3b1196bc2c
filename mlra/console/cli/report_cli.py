"""`mlra report`: a batch folder's report (report.md, .csv, .json and the plots) written
again from its runs alone, as `mlra batch` writes it at its end.

Imported only when `mlra report` is named (console/cli/cli.py's table). A folder with no
runs, or one that cannot be written, is one line and exit status 2, and no report is
left behind.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mlra.batch.report import write_report
from mlra.batch.report_plots import PLOTS_MISSING, can_plot
from mlra.batch.report_rows import collect
from mlra.console.text.args import EXIT_OK, UsageError, check_writable_dir
from mlra.terminal_text import printable


def add_report_command(sub: Any) -> None:
    report = sub.add_parser(
        "report",
        description="Write report.md, report.csv, report.json and PNG plots from a batch "
        "folder's runs alone.",
    )
    report.add_argument("dir", type=Path, metavar="DIR", help="a batch folder (or a runs folder)")
    report.add_argument("--no-plots", action="store_true", help="tables only")
    report.add_argument(
        "--attempt",
        choices=["first", "last"],
        default="first",
        help="which attempt of each seed the means count: the first that started (default; "
        "retrying cannot move a mean) or the last",
    )
    report.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    folder: Path = args.dir
    if not folder.is_dir():
        raise UsageError(f"report: {folder} is not a folder")
    if not collect(folder):  # checked first, so that no empty report is left behind
        raise UsageError(f"report: no runs in {folder}, so no report was written")
    check_writable_dir(folder, "report:")
    write_report(folder, plots=not args.no_plots, attempt=args.attempt)
    # Escaped as it was written; again here, in case the file was not written by this mlra.
    print(printable((folder / "report.md").read_text(encoding="utf-8")), end="")
    if not args.no_plots and not can_plot():
        print(PLOTS_MISSING, file=sys.stderr)  # stdout stays report.md's text
    return EXIT_OK
