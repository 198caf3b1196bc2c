"""How `mlra batch` ends, and what it says then: the summary once every run is settled
(the means over seeds, each run not done, the counts), a stop by Ctrl-C or SIGTERM
(what is left, and that the same command carries it on), and a Ray cluster lost. In
each case the report of the runs so far is written, so no ending is a bare error.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from mlra.batch.report import write_batch_report, write_report
from mlra.batch.report_plots import PLOTS_MISSING, can_plot
from mlra.batch.report_rows import collect
from mlra.batch.report_tables import group_line
from mlra.batch.state import run_status
from mlra.console.text.args import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from mlra.terminal_text import printable_line


def ended(out: Path, notes: list[str], progress: Any) -> int:
    """Every run settled: the batch's notes, its report written and summed up, each run
    not finished named with why; exit 0 only where all finished."""
    for note in notes:
        print(printable_line(f"note: {note}"))
    groups, report = write_batch_report(out)
    if groups:
        print("mean ± standard error over seeds, as report.md counts them:")
        for group in groups:
            print(f"  {group_line(group)}")
    if not can_plot():
        print(PLOTS_MISSING)
    failed = [s for s in progress.statuses.values() if s.kind != "finished"]
    for s in failed:
        detail = f": {s.detail}" if s.detail else ""
        # An unscored run ended by itself (deadline, no submission...): final, not retried.
        what = "not scored" if s.kind == "unscored" else "not done"
        tries = f"{s.attempts} attempt{'' if s.attempts == 1 else 's'}"
        print(printable_line(f"{what}: {s.run_id} ({s.kind}, {s.reason or '-'}, {tries}){detail}"))
    unscored = progress.count("unscored")
    print(
        f"batch: {progress.count('finished')}/{progress.total} finished "
        + (f"and {unscored} unscored " if unscored else "")
        + f"({progress.skipped} already were; "
        + (f"{len(progress.resumed)} resumed; " if progress.resumed else "")
        + f"{progress.retries} "
        + ("retry" if progress.retries == 1 else "retries")
        + (
            f", {progress.lost} attempt{'' if progress.lost == 1 else 's'} lost with a node"
            if progress.lost
            else ""
        )
        + f") · {report}",
        flush=True,
    )
    sys.stdout.flush()
    return EXIT_OK if not failed else EXIT_FAILED


EXIT_TERMINATED = 128 + signal.SIGTERM


def stopped(out: Path, runs: list[Any], by: str = "Ctrl-C") -> int:
    """Ctrl-C (or SIGTERM): the runs have recorded their stop. What the batch leaves is said, and the
    report of the runs so far written, instead of a bare "interrupted"."""
    kinds = Counter(run_status(out, r.run_id).kind for r in runs)
    midway, waiting = kinds["interrupted"], kinds["pending"] + kinds["failed"]
    before = kinds["finished"] + kinds["unscored"]
    left = [
        f"{midway} run{'' if midway == 1 else 's'} stopped midway" if midway else "",
        f"{waiting} not started or to retry" if waiting else "",
    ]
    words = " and ".join(w for w in left if w) or "nothing left to run"
    them = "it" if midway + waiting == 1 else "them"
    again = f"; the same command carries {them} on" if midway or waiting else ""
    report = f" · {write_batch_report(out)[1]}" if collect(out) else ""
    print(
        printable_line(f"batch: stopped ({by}): {words}{again}; {before} ended before{report}"),
        flush=True,
    )
    return EXIT_INTERRUPTED


def cluster_lost(out: Path, why: str, display: Any) -> None:
    """The cluster's head is gone, and Ray ends this process (~60 s on) saying so only in
    ray.log: the batch says it first, with the report so far, and exits itself."""
    display.close()
    report = ""
    if collect(out):  # its own runs' locks held: not read as another batch's (batch/state.py)
        write_report(out)
        report = f" · report {out / 'report.md'}"
    line = f"batch: the Ray cluster was lost ({why}), its runs with it; once it is back, "
    print(printable_line(line + f"the same command resumes the batch{report}"), flush=True)
    os._exit(EXIT_FAILED)
