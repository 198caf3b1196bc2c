"""The `mlra` command line.

Start-up must stay fast (`mlra --help` under 0.3 s), so this module imports
only argparse at the top; everything else is imported inside the command that
needs it. Bad input of any kind (flags, task files, model names, keys) gets one
readable line on stderr and exit status 2, before any run folder is made.

This module keeps `main` and the list of commands; each command's flags and code are
in a module of its own (`mlra run` in console/cli/run_cli.py, `mlra tasks` in
console/cli/tasks_cli.py, `mlra eval` in eval_cli.py, `mlra image` in image_cli.py, and so
on), which imports nothing heavy before its command runs.
"""

from __future__ import annotations

import argparse
import os
import sys

from mlra.console.text.args import EXIT_OK, EXIT_USAGE, Parser, dispatch


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mlra",
        description="A terminal console for ML research agents: start an LLM agent on an ML "
        "research task, watch and steer it, and get an honest score.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    from mlra.console.cli.eval_cli import add_eval_command
    from mlra.console.cli.image_cli import add_image_command
    from mlra.console.cli.run_cli import add_run_command
    from mlra.console.cli.tasks_cli import add_tasks_command

    add_run_command(sub)  # `mlra run`
    add_tasks_command(sub)  # `mlra tasks`
    add_eval_command(sub)  # `mlra eval`
    add_image_command(sub)  # `mlra image`

    from mlra.console.cli.resume_cli import add_resume_commands

    add_resume_commands(sub)
    from mlra.console.cli.attach_cli import add_attach_command  # `mlra attach`

    add_attach_command(sub)
    from mlra.console.cli.replay_cli import add_replay_command  # `mlra replay`
    from mlra.console.cli.runs_cli import add_runs_command  # `mlra runs`

    add_replay_command(sub)
    add_runs_command(sub)
    from mlra.console.cli.ctl_cli import add_ctl_command  # `mlra ctl`

    add_ctl_command(sub)
    from mlra.console.cli.batch_cli import (
        add_batch_commands,  # argparse only at import: start-up stays fast
    )

    add_batch_commands(sub)
    from mlra.console.cli.annotate_cli import add_annotate_command  # `mlra annotate`

    add_annotate_command(sub)
    from mlra.console.cli.export_cli import add_export_command  # `mlra export`

    add_export_command(sub)
    from mlra.console.cli.share_cli import add_share_command  # `mlra share`

    add_share_command(sub)
    from mlra.console.cli.compare_cli import add_compare_command  # `mlra compare`

    add_compare_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from mlra import __version__

        print(f"mlra {__version__}")
        return EXIT_OK
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return dispatch(args)
    except KeyboardInterrupt:
        sys.stderr.write("mlra: interrupted\n")
        return 130
    except BrokenPipeError:
        # `mlra tasks show X | head`: the reader has what it wanted; no traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
