"""The `mlra` command line: `main` and the table of its commands.

Start-up must stay fast (`mlra --help` under 0.3 s), so the commands are a table of
name -> ("module:attr", one line of help): `mlra --help` lists them from the table
alone, and `mlra COMMAND ...` imports only COMMAND's module, whose `attr(sub)` adds
its parser to the sub-command action (`mlra run` in console/cli/run_cli.py, `mlra
tasks` in tasks_cli.py, and so on). A command module may therefore import what it
needs at its top. Bad input of any kind (flags, task files, model names, keys) gets
one readable line on stderr and exit status 2, before any run folder is made.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from mlra import __version__
from mlra.console.text.args import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    Parser,
    UsageError,
    dispatch,
)
from mlra.lazy_load import load
from mlra.terminal_text import printable

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("mlra.console.cli.run_cli:add_run_command", "run an agent on a task"),
    "tasks": ("mlra.console.cli.tasks_cli:add_tasks_command", "list the tasks, or show one"),
    "eval": ("mlra.console.cli.eval_cli:add_eval_command", "grade a run's submission again"),
    "image": ("mlra.console.cli.image_cli:add_image_command", "the Docker image for real runs"),
    "resume": (
        "mlra.console.cli.resume_cli:add_resume_command",
        "continue a run that crashed, was killed or was stopped",
    ),
    "fork": (
        "mlra.console.cli.resume_cli:add_fork_command",
        "start a new run from a recorded run's state at a step",
    ),
    "attach": (
        "mlra.console.cli.attach_cli:add_attach_command",
        "open the console on a live run (q detaches, the run goes on)",
    ),
    "replay": ("mlra.console.cli.replay_cli:add_replay_command", "step through a recorded run"),
    "runs": ("mlra.console.cli.runs_cli:add_runs_command", "list the recorded runs"),
    "ctl": (
        "mlra.console.cli.ctl_cli:add_ctl_command",
        "control a live run from outside: pause, resume, step, approve, inject, stop...",
    ),
    "batch": (
        "mlra.console.cli.batch_cli:add_batch_command",
        "run tasks x models x seeds headless, resumably, and report",
    ),
    "report": (
        "mlra.console.cli.report_cli:add_report_command",
        "tables and plots of a batch's runs",
    ),
    "annotate": (
        "mlra.console.cli.annotate_cli:add_annotate_command",
        "tag, comment on and rate a run's steps; list or export the notes",
    ),
    "export": (
        "mlra.console.cli.export_cli:add_export_command",
        "write a run or a batch into MLflow, W&B (offline) or TensorBoard",
    ),
    "share": (
        "mlra.console.cli.share_cli:add_share_command",
        "write a run or a batch as one self-contained HTML page",
    ),
    "compare": ("mlra.console.cli.compare_cli:add_compare_command", "compare runs side by side"),
}
"""Each command, in the order `mlra --help` lists them: its adder, called with the
sub-command action (it calls `sub.add_parser(NAME, description=...)`, adds its flags
and `set_defaults(func=...)`), and the line `mlra --help` shows for it. A module
that adds two commands (resume and fork, batch and report) has a row for each."""

if TYPE_CHECKING:
    _SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    _SubParsers = argparse._SubParsersAction


class LazyCommands(_SubParsers):
    """The sub-command action, holding a stand-in parser for each row until the
    command line names it (or `build` is asked for it): only then is the row's
    module imported and its real parser made."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unbuilt: dict[str, str] = {}
        self.listed: set[str] = set()

    def add_row(self, name: str, target: str, help: str) -> None:
        self.listed.add(name)
        self.unbuilt[name] = target
        super().add_parser(name, help=help)  # listed by --help, a known choice, not yet built

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if name in self.listed:  # the row's module: its stand-in goes, the table's line stays
            kwargs.pop("help", None)
            self._name_parser_map.pop(name, None)
        return super().add_parser(name, **kwargs)

    def build(self, name: str) -> None:
        target = self.unbuilt.pop(name, None)
        if target is None:
            return
        stand_in = self._name_parser_map[name]
        adder = load(target)
        assert callable(adder), target
        adder(self)
        if self._name_parser_map.get(name, stand_in) is stand_in:
            raise RuntimeError(f"{target} added no `{name}` command")

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        self.build(values[0])
        super().__call__(parser, namespace, values, option_string)


def build_parser(*, lazy: bool = False) -> argparse.ArgumentParser:
    """The whole command line; `lazy` (what `main` uses) leaves each command's parser
    unbuilt, its module unimported, until the command line names it."""
    parser = Parser(
        prog="mlra",
        description="A terminal console for ML research agents: start an LLM agent on an ML "
        "research task, watch and steer it, and get an honest score.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=Parser, action=LazyCommands
    )
    assert isinstance(sub, LazyCommands)
    for name, (target, help) in COMMANDS.items():
        sub.add_row(name, target, help)
    if not lazy:
        for name in COMMANDS:
            sub.build(name)
    return parser


def own_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the command `argv` names (`mlra compare`'s for `mlra compare A B
    --curves`, a sub-command's where one has them): its usage error points to its own
    help, where its flags are listed, not to `mlra --help`."""
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and word in subs[0].choices:
            parser = subs[0].choices[word]
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(lazy=True)
    try:
        args, unknown = parser.parse_known_args(argv)
    except UsageError as exc:  # an argument's lookup (a run id that names no run: `run_path`)
        sys.stderr.write(f"mlra: {printable(str(exc))}\n")
        return exc.exit_status
    if unknown:  # said by the command's own parser, so it points to `mlra COMMAND --help`
        own_parser(parser, sys.argv[1:] if argv is None else argv).error(
            f"unrecognized arguments: {' '.join(unknown)}"
        )
    if args.version:
        print(f"mlra {__version__}")
        return EXIT_OK
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return dispatch(args)
    except KeyboardInterrupt:
        sys.stderr.write("mlra: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `mlra tasks show X | head`: the reader has what it wanted; no traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
