"""`mlra tasks`: the task list, one task shown, and the sub-actions on task folders
(import, prepare, clear-baseline, env), each of which lives in its own module.

Apart from console/cli/cli.py, which keeps `main` and the table of commands. Unlike the
other command modules, this one imports the task models inside the command: `mlra tasks
--help`, like `mlra --help`, loads no pydantic (tests/console/test_cli.py).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from mlra.console.text.args import EXIT_OK, UsageError


def add_tasks_command(sub: Any) -> None:
    tasks = sub.add_parser(
        "tasks",
        description="List the tasks (`mlra tasks`), or show one (`mlra tasks NAME`, "
        "or `mlra tasks show NAME`): its prompt, metric, rules and what it needs. NAME may "
        "be an MLAgentBench or MLRC-Bench task folder; `mlra tasks import PATH OUT` writes "
        "one as an mlra task folder; `mlra tasks prepare PATH` prepares one (its prepare.py, "
        "once), checks the copy holds data, and says what its code imports and downloads "
        "that this machine lacks; `mlra tasks clear-baseline PATH [RUN_ID]` forgets the "
        "baseline runs recorded for a folder (all, or one); `mlra tasks env PATH` builds a "
        "task's own Python environment (its declared requirements) where none is cached "
        "and says where it is.",
    )
    tasks.add_argument(
        "action", nargs="?", default="list", metavar="NAME", help="a task to show (default: list)"
    )
    tasks.add_argument("name", nargs="?", help=argparse.SUPPRESS)
    tasks.add_argument("out", nargs="?", help=argparse.SUPPRESS)  # tasks import PATH OUT
    tasks.set_defaults(func=cmd_tasks)


def _reference(score: float | None) -> str:
    return "unknown" if score is None else f"{score:g}"


def load_task_named(name: str) -> Any:
    """The task a name or folder names, or one line saying why there is none."""
    from mlra.tasks.spec import TaskError, find_task

    try:
        return find_task(name)
    except TaskError as exc:
        raise UsageError(str(exc)) from None


def cmd_tasks(args: argparse.Namespace) -> int:
    from mlra.tasks.challenge import rule_lines
    from mlra.tasks.readiness import blockers, needs, task_needs
    from mlra.tasks.spec import TaskError, builtin_task_dirs, load_task
    from mlra.tasks.success import success_bar
    from mlra.terminal_text import printable

    if args.action == "env":
        from mlra.console.cli.env_cli import cmd_tasks_env

        return cmd_tasks_env(args)
    if args.action == "import":
        from mlra.console.cli.foreign_cli import cmd_tasks_import

        return cmd_tasks_import(args)
    if args.action == "clear-baseline":
        from mlra.console.cli.baseline_cli import cmd_tasks_clear_baseline

        return cmd_tasks_clear_baseline(args)
    if args.action == "prepare":
        from mlra.console.cli.needs_cli import cmd_tasks_prepare

        return cmd_tasks_prepare(args)
    if args.out is not None:
        raise UsageError(f"tasks: unexpected {args.out!r}")
    if args.action not in ("list", "show"):  # `mlra tasks NAME` shows NAME
        if args.name is not None:
            raise UsageError(f"tasks: one task at a time (got {args.action!r} and {args.name!r})")
        args.action, args.name = "show", args.action
    elif args.action == "list" and args.name is not None:
        raise UsageError(f"tasks list takes no name (to show one: `mlra tasks {args.name}`)")
    if args.action == "show":
        if not args.name:
            raise UsageError("tasks show: name a task (see `mlra tasks`)")
        from mlra.console.cli.foreign_cli import list_benchmark_folder

        if list_benchmark_folder(Path(args.name)):  # a folder of MLAgentBench tasks, say
            return EXIT_OK
        task = load_task_named(args.name)
        print(printable(task.render_prompt()))  # a task file's text: shown, not obeyed
        m = task.metric
        way = "higher" if m.higher_is_better else "lower"
        facts = [
            f"metric:     {m.name} ({f'{way} is better' if m.direction_known else 'direction unknown'}"
            + (", self-reported" if m.self_reported else "")
            + f"); baseline {_reference(m.baseline)}, top reference {_reference(m.top)}",
            f"success:    {success_bar(m) or m.success_rule + ' (a reference it needs is unset)'}",
            f"graded by:  {task.evaluator.kind} on {task.evaluator.artifact}",
        ]
        if task.files.read_only:
            facts.append("read-only:  " + ", ".join(task.files.read_only))
        rules = task.constraints.model_dump(exclude_defaults=True)
        if rules:
            facts.append("rules:      " + "; ".join(f"{k} = {v}" for k, v in rules.items()))
        facts += rule_lines(task.challenge)
        facts.append(
            f"needs:      {needs(task)}"
            + (f"; data: {task.resources.data}" if task.resources.data else "")
        )
        from mlra.console.cli.foreign_cli import foreign_lines
        from mlra.console.cli.needs_cli import machine_line, needs_lines

        found = task_needs(task)  # once: it reads every file of the task's code
        facts += [
            machine_line(task, blockers(task, found), found),
            *foreign_lines(task),
            *needs_lines(task, found),
        ]
        width = _width()
        for fact in facts:  # a task file's text among them: shown, not obeyed
            for line in printable(fact).splitlines():
                _print_hanging(line, width)
        return EXIT_OK
    width = _width()
    for folder in builtin_task_dirs():
        try:
            task = load_task(folder)
        except TaskError as exc:
            _print_row(folder.name, f"BROKEN: {exc}", width)
            continue
        problems = blockers(task)
        status = "ready" if not problems else "cannot run here now: " + "; ".join(problems)
        _print_row(task.name, task.title, width)
        _print_row("", f"needs {needs(task)} · {status}", width)
    return EXIT_OK


NAME_COLUMN = 24
"""The task names' column: what follows it starts one space past, on every line."""


def _width() -> int | None:
    """The width a terminal gives the list (COLUMNS where it is set); a pipe gets each
    row on one line, whole, for a script or grep to read."""
    import shutil
    import sys

    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


_HANG = re.compile(r"\s*(?:[-·] )?(?:[\w -]{1,20}:\s+)?")
"""Where a line of `mlra tasks NAME` hangs its further lines: after its label
("needs:      ", "      why: ") or its bullet ("- ", "  · ")."""


def _print_hanging(line: str, width: int | None) -> None:
    """A line of a task's facts, on a terminal wrapped at words under its own text."""
    import textwrap

    hang = _HANG.match(line)
    indent = " " * (hang.end() if hang else 0)
    if width is None or len(line) <= width or width - len(indent) < 20:
        print(line)
        return
    print("\n".join(textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False)))


def _print_row(name: str, text: str, width: int | None) -> None:
    """One row of the list: on a terminal wrapped at words to `width`, each further line
    indented under the text, as a table's cell wraps (a terminal's own wrap starts it
    at column 0, under the names)."""
    import textwrap

    from mlra.terminal_text import printable_line

    first = printable_line(f"{name:<{NAME_COLUMN}} ")
    text = printable_line(text)
    indent = " " * (NAME_COLUMN + 1)
    if width is None or width - len(indent) < 20:  # too narrow to wrap into: as it comes
        print((first + text).rstrip())
        return
    lines = textwrap.wrap(
        text,
        width,
        initial_indent=first,
        subsequent_indent=indent,
        break_on_hyphens=False,
    )
    print("\n".join(lines))
