"""`mlra attach RUN`: the full console on a run that goes on in another process (headless,
in a batch, or in another terminal's console); q leaves it and the run goes on.

RUN is a run folder, or a run id under --runs-dir. A run that is not live is one line
and exit 2, saying what can be done with it instead.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlra.agent.record.eventlog import EVENTS_FILE, log_is_live
from mlra.agent.record.state import RunState
from mlra.console.apps.headless_run import final_line
from mlra.console.text.args import UsageError, run_folder, shown_folder
from mlra.console.text.attach_run import RemoteRun
from mlra.control_socket import CtlRequest, NotLive, request
from mlra.terminal_text import printable_line


def add_attach_command(sub: Any) -> None:
    attach = sub.add_parser(
        "attach",
        description="Open the full console on a run that is running in another process "
        "(headless, in a batch, or in another console): its panes from the log so far, then "
        "live, every key working. One attached console at a time holds the controls; the "
        "others watch. q detaches and the run goes on; s stops and evaluates it.",
    )
    attach.add_argument("run", metavar="RUN", help="a run folder, or a run id under --runs-dir")
    attach.add_argument(
        "--runs-dir", type=Path, default=Path("runs"), help="the runs folder (default ./runs)"
    )
    attach.set_defaults(func=cmd_attach)


def not_live_line(run_dir: Path, shown: str) -> str:
    """Why RUN cannot be attached to, and what to do with it instead."""

    folder = shown_folder(run_dir)
    if (run_dir / "result.json").is_file():
        return f"{shown} has ended: mlra replay {folder} steps through it"
    if log_is_live(run_dir / EVENTS_FILE):
        return f"{shown} is running but serves no control socket (it says why in its log)"
    return f"{shown} is not running (stopped without an end): mlra resume {folder} goes on with it"


def cmd_attach(args: argparse.Namespace) -> int:
    run_dir = run_folder(args.run, args.runs_dir)
    shown = args.run
    try:
        reply = request(run_dir, CtlRequest(op="status", client="attach"), timeout=5.0)
    except NotLive:
        raise UsageError(not_live_line(run_dir, shown)) from None
    except PermissionError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{shown}: its control socket does not answer: {exc}") from None
    if not reply.ok or reply.status is None:
        raise UsageError(f"{shown}: {reply.message or 'the run did not say how it stands'}")
    if reply.status.state == "ended":
        raise UsageError(f"{shown} has ended: mlra replay {shown_folder(run_dir)} steps through it")
    return _attach(run_dir)


def detached_line(run_dir: Path, state: RunState) -> str:
    """What a console leaving a run says of it: where a pause or a breakpoint holds it,
    "the run goes on" was untrue (it waits for a resume or an approval from someone)."""
    back = f"mlra attach {run_dir} comes back"
    if state.paused:
        return f"detached; the run stays paused · {back}, or mlra ctl {run_dir} resume goes on"
    if state.pending_approval is not None:
        tool = printable_line(state.pending_approval.tool)
        return (
            f"detached; the run waits for approval of its {tool} call · {back}, or "
            f"mlra ctl {run_dir} approve runs it"
        )
    return f"detached; the run goes on · {back}"


def _attach(run_dir: Path) -> int:
    # lazy: Textual, which the one-line answer for a finished run never needs
    from mlra.console.apps.attach_app import AttachApp
    from mlra.console.apps.collector import steady_collector

    app = AttachApp(RemoteRun(run_dir))
    steady_collector()
    code = app.run()
    if app.detached:
        print(detached_line(run_dir, app.remote.state))
        return 0
    if app.result is not None:
        print(final_line(run_dir, app.result))
    elif app.remote.gone is not None:
        print(f"the run no longer answers · mlra resume {run_dir} goes on with it")
    return code if code is not None else app.exit_code()
