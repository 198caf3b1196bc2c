"""`mlra tasks clear-baseline PATH [RUN_ID]`: forget the baseline runs recorded for a
foreign folder (all of them, or the one a bad run left), so the next baseline run
measures it afresh. What is recorded is listed by `mlra tasks show PATH`."""

from __future__ import annotations

import argparse

from mlra.console.text.args import EXIT_OK, UsageError
from mlra.tasks.foreign import measurements
from mlra.tasks.foreign.baselines import records_baselines
from mlra.tasks.spec import TaskError, find_task
from mlra.terminal_text import printable_line


def cmd_tasks_clear_baseline(args: argparse.Namespace) -> int:
    if not args.name:
        raise UsageError("tasks clear-baseline: give a task folder (PATH [RUN_ID])")
    try:
        task = find_task(args.name)
    except TaskError as exc:
        raise UsageError(str(exc)) from None
    if not records_baselines(task):
        raise UsageError(
            f"tasks clear-baseline: {args.name} has no measured baseline to clear (an mlra "
            "task states its baseline in task.toml; a benchmark's published one is kept)"
        )
    before = measurements.runs_of(task.root, task.metric.failure_values)
    if args.out is not None and not any(r.get("run") == args.out for r in before):
        raise UsageError(f"tasks clear-baseline: no baseline run {args.out!r} is recorded")
    left = measurements.clear(task.root, args.out)
    gone = len(before) - len(left)
    print(
        printable_line(
            f"cleared {gone} baseline run{'' if gone == 1 else 's'} of {task.name}; "
            + (f"{len(left)} left" if left else "its baseline is unknown until measured again")
        )
    )
    return EXIT_OK
