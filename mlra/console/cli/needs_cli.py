"""What a task needs, said before a run rather than found out hours into it: a task this
machine cannot grade is refused (exit 2, one line) unless the user runs it
`--ungraded`; what its starter lacks is said at the run's start; and `mlra tasks
prepare PATH` prepares a benchmark's folder, checks that the copy holds data, and
prints what its code imports and downloads (tasks/needs.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mlra.console.text.args import EXIT_OK, UsageError
from mlra.tasks.foreign.loader import is_foreign, marker
from mlra.tasks.foreign.prepare import prepared, recheck
from mlra.tasks.needs import listed
from mlra.tasks.readiness import grading_problems, task_needs
from mlra.tasks.spec import TaskError, find_task, load_task
from mlra.terminal_text import printable

UNGRADED_HINT = "--ungraded runs it anyway"


def gradable_or_refused(task: Any, ungraded: bool, *, who: str = "") -> str:
    """Why `task` cannot be graded here ("" when it can); refused in one line (exit 2)
    unless the user runs it ungraded, in which case the reason is what the run records."""

    problems = grading_problems(task)
    if not problems:
        return ""
    why = "; ".join(problems)
    if not ungraded:
        raise UsageError(f"{who}{task.name} cannot be graded here: {why} ({UNGRADED_HINT})")
    return why


def starter_notices(task: Any) -> list[str]:
    """What the unchanged starter would fail on here, for notices at the run's start."""

    found = task_needs(task)
    return [
        f"{problem} (in {found.python}): its first run will fail on it"
        for problem in found.starter_problems()
    ] + found.fetch_notes()


def machine_line(task: Any, problems: list[str], found: Any = None) -> str:
    """`this machine:` in `mlra tasks show`: ready only where nothing stops a run, its
    grading included, and the starter runs as given; `found`: the task's needs, where
    the caller has them already (a check reads every file of the task's code)."""

    if problems:
        return "this machine: cannot run it now: " + "; ".join(problems)
    found = found if found is not None else task_needs(task)
    notes = "".join(f" ({note})" for note in found.fetch_notes())
    lacking = found.starter_problems()
    if lacking:
        return "this machine: can run and grade it, but " + "; ".join(lacking) + notes
    return "this machine: ready" + notes


def needs_lines(task: Any, found: Any = None) -> list[str]:
    """What `mlra tasks show` and `mlra tasks prepare` say of the task's code: the
    interpreter asked, what the evaluator and the starter import that it lacks, and
    the datasets they would download; `found` as for `machine_line`."""

    found = found if found is not None else task_needs(task)
    pending = " (its own environment is not built yet: `mlra tasks env PATH` builds it)"
    lines = [f"python:     {found.python}" + (pending if found.environment_pending else "")]
    if found.error:
        lines.append(f"imports:    not checked: {found.error}")
    elif found.environment_pending:
        for who, missing in (
            ("evaluator", found.evaluator_missing),
            ("starter", found.starter_missing),
        ):
            shown = listed(missing)
            lines.append(
                f"{who + ':':<12}"
                + (
                    f"imports {shown}, not in mlra's interpreter: judged once its environment is built"
                    if missing
                    else "imports all found in mlra's interpreter"
                )
            )
    else:
        grader = (
            "imports all found"
            if found.evaluator_files
            else "mlra's own (the task ships no grading code to check)"
        )
        for problem in found.grading_problems():
            if problem.startswith("its evaluator imports"):
                grader = problem.removeprefix("its evaluator ")
        lines.append(f"evaluator:  {grader}")
        starter = "imports all found" if found.starter_files else "no Python files"
        for problem in found.starter_problems():
            if problem.startswith("the starter imports"):
                starter = problem.removeprefix("the starter ") + ": its first run will fail"
        lines.append(f"starter:    {starter}")
    if found.downloads_unjudged:
        lines.append(f"downloads:  {found.downloads_unjudged}")
    else:
        downloads = [p for p in found.grading_problems() if p.startswith("grading would")]
        downloads += [p for p in found.starter_problems() if p.startswith("the starter downloads")]
        downloads += found.fetch_notes()
        lines.append("downloads:  " + ("; ".join(downloads) if downloads else "none needed"))
    return lines


def cmd_tasks_prepare(args: argparse.Namespace) -> int:
    """`mlra tasks prepare PATH`: the folder prepared once (or its cached copy checked
    again, and made afresh where it holds nothing), then what its code needs."""

    if not args.name:
        raise UsageError("tasks prepare: name a task folder (an MLAgentBench or MLRC-Bench task)")
    if args.out is not None:
        raise UsageError(f"tasks prepare: unexpected {args.out!r}")

    def echo(line: str) -> None:
        print(printable(line), file=sys.stderr, flush=True)

    try:
        task = find_task(args.name)
        if is_foreign(task.root):
            found = marker(task.root)
            removed = recheck(task)
            if removed is not None:
                echo(removed)
                assert found is not None
                task = load_task(Path(found.source))  # the benchmark's folder, prepared afresh
            task = prepared(task, echo=echo)
            copy = marker(task.root)
            print(
                printable(
                    f"prepared:   {task.root}"
                    + (f" (from {copy.source})" if copy is not None else "")
                )
            )
        else:
            print(printable(f"prepared:   {task.root} is an mlra task: nothing to prepare"))
    except TaskError as exc:
        raise UsageError(str(exc)) from None

    found = task_needs(task)  # once: it reads every file of the task's code
    for line in needs_lines(task, found):
        print(printable(line))
    ungradable = grading_problems(task, found)
    if ungradable:
        print(printable(f"grading:    cannot be graded here: {'; '.join(ungradable)}"))
    return EXIT_OK
