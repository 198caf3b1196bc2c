"""A task's own Python environment at the command line: `mlra tasks env PATH` builds it
where the cache has none and says where it is and how long it took; `mlra run` builds
it before the run starts, so a build that fails is one line and exit 2, not a run that
ends in an error (tasks/environment.py)."""

from __future__ import annotations

import argparse
import platform
import sys
import time
from typing import Any

from mlra.console.text.args import EXIT_OK, UsageError


def _echo(line: str) -> None:
    from mlra.terminal_text import printable

    print(printable(line), file=sys.stderr, flush=True)


def cmd_tasks_env(args: argparse.Namespace) -> int:
    """`mlra tasks env PATH`."""
    from mlra.tasks.environment import TaskEnvError, ensure_environment, requirements_of
    from mlra.tasks.spec import TaskError, find_task
    from mlra.terminal_text import printable_line

    if not args.name:
        raise UsageError("tasks env: name a task or a task folder")
    if args.out is not None:
        raise UsageError(f"tasks env: unexpected {args.out!r}")
    try:
        task = find_task(args.name)
        lines = requirements_of(task)
    except (TaskError, TaskEnvError) as exc:
        raise UsageError(str(exc)) from None
    if lines is None:
        print(
            printable_line(
                f"{task.name} declares no requirements: it runs on mlra's own interpreter "
                f"({sys.executable}, Python {platform.python_version()})"
            )
        )
        return EXIT_OK
    started = time.monotonic()
    try:
        found = ensure_environment(task, echo=_echo)
    except TaskEnvError as exc:
        raise UsageError(str(exc)) from None
    assert found is not None
    took = time.monotonic() - started
    print(printable_line(found.describe()))
    print(printable_line(f"python:  {found.python}"))
    print(f"this call: {took:.2f} s" if took >= 1 else f"this call: {took * 1000:.0f} ms")
    return EXIT_OK


def environment_before_run(task: Any, sandbox: str, image: str | None) -> None:
    """The task's own environment built before `mlra run` starts the run (the run finds
    it in the cache); a failure refused in one line (exit 2). Only the build's start is
    said here (it can take minutes): which environment the run has, or why a container
    cannot use it, is the run's start notice (agent/setup/run_setup.py
    `task_environment`), which every display shows; said here too, a headless run
    printed it twice."""
    from mlra.tasks.environment import TaskEnvError, ensure_environment

    if not task.environment.declared:
        return
    from mlra.agent.setup.run_setup import environment_notice

    if environment_notice(task, sandbox, image) is not None:
        return
    try:
        ensure_environment(task, echo=_echo)
    except TaskEnvError as exc:
        raise UsageError(str(exc)) from None
