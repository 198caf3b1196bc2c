"""`mlra share RUN|BATCH [-o FILE.html] [--max-mb N]`: a run or a batch as one
self-contained HTML page for a colleague, written by batch/share/ (without -o, to
RUN.html in the current folder, as `mlra export` writes to ./mlruns by default).

Bad input (a folder that is no run, an output folder that does not exist, a budget
that is no positive number) is one line and exit status 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlra.agent.record.eventlog import EVENTS_FILE, LogDamage
from mlra.batch.share.batch_page import write_batch_page
from mlra.batch.share.run_page import write_run_page
from mlra.batch.share.run_read import NotARun
from mlra.console.text.args import UsageError, find_run, positive_float
from mlra.terminal_text import printable_line


def add_share_command(sub: Any) -> None:
    p = sub.add_parser(
        "share",
        description="Write a run (or a batch) as one HTML file that opens from a file, a "
        "static host or an email attachment with no server, no network and no mlra: its "
        "header, notes, attempts, curves (inline SVG), plan and transcript (folded). The "
        "agent's text is escaped, never rendered; API keys are redacted; the page allows no "
        "network (Content-Security-Policy). A run still going is shared as it is now.",
    )
    p.add_argument("run", metavar="RUN|BATCH", help="a run folder, a batch folder, or a run id")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE.html",
        help="the page to write (default: the run's or batch's folder name .html, here)",
    )
    p.add_argument(
        "--max-mb",
        type=positive_float,
        default=20.0,
        help="the page's size budget in MB (default 20): long outputs are cut to head and "
        "tail, later steps left out; scores, attempts and notes never are",
    )
    p.add_argument(
        "--runs-dir", type=Path, default=Path("runs"), help="where run ids are (default ./runs)"
    )
    p.set_defaults(func=cmd_share)


def cmd_share(args: argparse.Namespace) -> int:
    path = find_run(args.run, args.runs_dir, folders=True)
    if not path.is_dir():
        raise UsageError(f"{printable_line(str(path))}: no such run or batch folder")
    out: Path = args.output or Path(f"{path.resolve().name}.html")
    if not out.parent.is_dir():
        raise UsageError(f"{printable_line(str(out.parent))}: no such folder for the page")
    if out.is_dir():
        raise UsageError(f"{printable_line(str(out))} is a folder; name the page's file")
    try:
        if (path / EVENTS_FILE).is_file():
            summary = write_run_page(path, out, max_mb=args.max_mb)
            left = summary.get("left_out") or {}
            said = "; what it cut or left out is listed on it" if left else ""
        else:
            write_batch_page(path, out, max_mb=args.max_mb)
            said = ""
    except (NotARun, LogDamage) as exc:
        raise UsageError(printable_line(str(exc))) from None
    size = out.stat().st_size
    print(printable_line(f"wrote {out} ({size / 1024 / 1024:.2f} MB){said}"))
    return 0
