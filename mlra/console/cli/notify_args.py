"""`--notify DEST` on the commands that start a run (run, resume, fork, batch).

Checked as it is parsed, so a bad destination is one line and exit status 2 before
anything starts; what the user wrote is kept as written (agent/notify/ reads it again
where the run is made), and is never recorded, since a URL or command may hold a token.
"""

from __future__ import annotations

import argparse


def notify_destinations(text: str) -> list[str]:
    from mlra.agent.notify import parse_destinations

    try:
        return [d.written for d in parse_destinations(text)]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


RUN_HELP = (
    "tell you when the run needs you or ends: bell, desktop, cmd:COMMAND (the notification "
    "as JSON on its stdin), or an http(s):// webhook URL (a JSON POST); repeat it or "
    "separate with commas. On: a call waiting for approval, a new best validation, a "
    "provider failure that paused the run, the time warning, the end with the score"
)


def add_notify_arg(parser: argparse.ArgumentParser, *, help: str = RUN_HELP) -> None:
    parser.add_argument(
        "--notify",
        action="extend",
        type=notify_destinations,
        default=[],
        metavar="DEST",
        help=help,
    )
