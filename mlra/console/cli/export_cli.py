"""`mlra export RUN|BATCH --to mlflow|wandb|tensorboard [--dest DIR_OR_URI]`: a run (with
its attempts) or a whole batch written into a tracker, where researchers compare runs.

Nothing leaves the machine unless the user names a server (an `http(s)://` MLflow
tracking URI as --dest): MLflow writes its file store, W&B an offline run, TensorBoard
event files. Bad input (an unknown target, a folder that is no run, the tracker's
package missing) is one line and exit status 2. The transcript each run carries is the
one `mlra replay --no-tui` prints, made by the console's own display.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlra.batch.export.trackers import TRACKERS  # a table of strings: imports no tracker
from mlra.lazy_load import either

if TYPE_CHECKING:  # `mlra --help` imports this module: argparse and the table at its top
    from mlra import events as ev


def add_export_command(sub: Any) -> None:
    p = sub.add_parser(
        "export",
        help=f"write a run or a batch into {either(t.title for t in TRACKERS.values())}",
        description="Write a run (with its search's attempts as child runs) or a batch into "
        f"a tracker, one {either(t.groups for t in TRACKERS.values())} per task, "
        "so runs of a task exported at different times sit together: its parameters (task, model, limits, seed, "
        "search), its curves (the metrics read from its jobs, commands and files), its "
        "validations and final score, and its result.json, transcript and event log. "
        f"Local unless --dest names a server: {', '.join(t.local for t in TRACKERS.values())}. "
        "Needs the tracker's package (pip install mlflow-skinny, wandb or tensorboard; all "
        "three: pip install 'mlra[export]').",
    )
    p.add_argument(
        "run",
        metavar="RUN|BATCH",
        help="a run folder, a batch folder, a folder of runs, or a run id",
    )
    p.add_argument("--to", required=True, choices=list(TRACKERS), help="the tracker")
    p.add_argument(
        "--dest",
        metavar="DIR_OR_URI",
        help="where to write: a folder, or for mlflow any tracking URI (sqlite:///, http(s)://)",
    )
    p.add_argument(
        "--runs-dir", type=Path, default=Path("runs"), help="where run ids are (default ./runs)"
    )
    p.set_defaults(func=cmd_export)


def transcript(events: list[ev.Event], run_dir: Path) -> str:
    """The run as `mlra replay --no-tui` prints it (plain text, no colour)."""
    from mlra.console.text.headless import TranscriptDisplay

    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    display.read_ahead(events, run_dir)
    for event in events:
        display.on_event(event)
    display.close()
    return out.getvalue()


def cmd_export(args: argparse.Namespace) -> int:
    from mlra.batch.export.source import NotARun, by_task, read_experiment
    from mlra.batch.export.trackers import TrackerMissing, writer
    from mlra.console.text.args import UsageError, find_run
    from mlra.terminal_text import printable

    path = find_run(args.run, args.runs_dir, folders=True)
    try:
        target = writer(args.to)
        experiment = read_experiment(path, transcript)
    except (NotARun, TrackerMissing) as exc:
        raise UsageError(str(exc)) from None
    for group in by_task(experiment):  # one experiment (project, folder) per task
        print(printable(target.write(group, args.dest or target.DEFAULT_DEST)))
    return 0
