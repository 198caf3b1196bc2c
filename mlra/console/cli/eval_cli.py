"""`mlra eval`: a run's submission graded again, the re-grade recorded beside the run's
own result and never in its place.

Apart from console/cli/cli.py, which keeps `main` and the list of commands.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import socket
from pathlib import Path
from typing import Any

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog, LogDamage, RunInUse, read_events
from mlra.agent.record.run_result import write_result
from mlra.agent.record.state import RunState, fold
from mlra.agent.setup.sandboxes import run_gpus
from mlra.console.text.args import (
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    check_writable_dir,
    run_path,
)
from mlra.console.text.event_lines import score_line
from mlra.tasks.evaluators.progress import progress_words
from mlra.tasks.grading import grade, grade_artifact
from mlra.tasks.spec import TaskError, find_task, load_task
from mlra.tasks.success import with_direction
from mlra.terminal_text import printable_line
from mlra.tools.sandbox.run_uid import root_outside_words
from mlra.tools.submission import artifact_digest, describe_error


def add_eval_command(sub: Any) -> None:
    evaluate = sub.add_parser(
        "eval",
        description="Grade a run's submission again, host-side: the copy frozen when the run "
        "ended, or with --path a path of the workspace as it is now.",
    )
    evaluate.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=str,
        help="a run folder (runs/<run-id>), or a run id in ./runs",
    )
    evaluate.add_argument(
        "--path",
        help="grade this path of the workspace as it is now, instead of the frozen submission",
    )
    evaluate.add_argument(
        "--isolation",
        choices=["auto", "bwrap", "none"],
        default="auto",
        help="the evaluator's sandbox (default: bubblewrap when it works, else unconfined)",
    )
    evaluate.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    """Grade a run's submission again; the new evaluation is appended to the run's log.

    What was frozen at submission is what is graded, checked against its recorded
    digest; the workspace (changed since, perhaps) only when asked with --path, or
    for a run that has no frozen copy, and the output says which. It is recorded as
    a re-grade (what, when, by whom), kept beside the run's own result in
    result.json, never in its place: a score the agent did not earn in its run must
    not read as its own.
    """

    run_dir = run_path(args.run_dir)
    log_path = run_dir / EVENTS_FILE
    if not log_path.is_file():
        raise UsageError(f"{run_dir} is not a run folder (no {EVENTS_FILE})")
    try:
        events = read_events(log_path)
    except LogDamage as exc:
        raise UsageError(str(exc)) from None
    state = fold(events)
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    if started is None:
        raise UsageError(f"{log_path} has no run_started event")
    try:
        task = (
            load_task(Path(started.task_dir))
            if started.task_dir and Path(started.task_dir).is_dir()
            else find_task(started.task)
        )
    except TaskError as exc:
        raise UsageError(str(exc)) from None

    task = with_direction(task, started.config.get("direction"))  # as the run stated it
    submission = state.submission
    submitted = args.path or (submission.path if submission else None)
    label = submitted or task.evaluator.artifact
    frozen = None
    if args.path is None and submission is not None and submission.frozen:
        frozen = run_dir / submission.frozen
        if not os.path.lexists(frozen):
            print(
                printable_line(
                    f"note: the frozen copy {submission.frozen} is missing; grading the workspace"
                )
            )
            frozen = None
        elif submission.sha256:
            try:
                digest = artifact_digest(frozen)[0]
            except (OSError, ValueError) as exc:
                raise UsageError(
                    f"the frozen copy {submission.frozen} cannot be read, so it is not "
                    f"graded: {describe_error(exc)}"
                ) from None
            if digest != submission.sha256:
                raise UsageError(
                    f"the frozen copy {submission.frozen} no longer matches the sha256 recorded "
                    "at submission; it was changed after the run, so it is not graded "
                    "(grade the workspace with --path)"
                )
    check_writable_dir(run_dir, "eval:")  # the new evaluation is appended to the run's log
    try:
        log = EventLog(log_path, start_seq=events[-1].seq if events else 0)
    except RunInUse as exc:
        raise UsageError(f"{exc}; wait for the run to end") from None
    log.subscribe(state.apply)

    def stamp(event: ev.Event) -> None:
        event.t = state.elapsed_s
        if isinstance(event, ev.EvaluationStarted):
            event.regrade_by = _who()
        log.append(event)

    def progress(event: ev.EvaluationProgress) -> None:
        stamp(event)
        print(f"grading: {progress_words(event)}", flush=True)  # escaped there

    def root_outside(what: str, problem: str) -> None:
        if state.root_outside is None:  # once a run, as the run itself says it
            said = ev.Notice(
                level="warning", kind="root_outside", message=root_outside_words(what, problem)
            )
            stamp(said)
            print(printable_line(f"note: {said.message}"))

    out_dir = run_dir / "evaluation"
    gpus = run_gpus(task, started.config.get("gpus"))  # as the run graded, on this machine
    disk_mb = started.config.get("disk_mb")  # its grader's quota follows the run's --disk
    if frozen is not None:
        assert submission is not None
        # `submission/submission`: the run folder's frozen copies keep the artifact's name,
        # which reads as a folder named twice; the copy is named once, then where it is.
        kept = Path(submission.frozen or "").parent.as_posix()
        print(
            printable_line(
                f"grading the copy of {submission.path or 'the artifact'} frozen at submission, "
                f"in the run folder's {kept}/ (sha256 {submission.sha256})"
            )
        )
        grading = grade_artifact(
            task,
            label,
            frozen,
            out_dir,
            graded=submission.frozen,
            sha256=submission.sha256,
            on_start=stamp,
            on_progress=progress,
            isolation=args.isolation,
            gpus=gpus,
            disk_mb=disk_mb if isinstance(disk_mb, int) else None,
            on_root_outside=root_outside,
        )
    else:
        print(printable_line(f"grading the workspace as it is now: {label}"))
        grading = grade(
            task,
            run_dir / "workspace",
            submitted,
            out_dir,
            workdir=state.sandbox.workdir if state.sandbox is not None else None,
            on_start=stamp,
            on_progress=progress,
            isolation=args.isolation,
            gpus=gpus,
            disk_mb=disk_mb if isinstance(disk_mb, int) else None,
            on_root_outside=root_outside,
        )
    try:
        _, finished = asyncio.run(grading)
        if state.sandbox is not None:
            finished.agent_isolation = state.sandbox.isolation
        stamp(finished)
    finally:
        log.close()
    if state.finished is not None:
        write_result(state, run_dir)

    print(printable_line(f"{task.name} · {label} · {score_line(finished)}"))
    print(f"re-grade recorded beside the run's own result ({_own_grading(state)})")
    if finished.isolation == "none":
        print("note: the evaluator ran unconfined (no isolation could be had)")
    if state.finished is None:
        print("note: the run has not finished (no run_finished event); result.json is not written")
    return EXIT_OK if finished.ok else EXIT_FAILED


def _own_grading(state: RunState) -> str:
    """The run's own grading, as the re-grade is told apart from it: a run graded, then
    resumed and not graded since has a grade, of the ending it went on past, which
    "no grading" would deny."""

    if state.evaluation is not None:
        return f"its own score: {score_line(state.evaluation)}"
    earlier = state.earlier_evaluation
    if earlier is None:
        return "the run had no grading"
    ending = state.earlier_ending
    how = f", as it ended {ending.status} ({ending.reason})" if ending is not None else ""
    return f"not graded since its resume; graded before it{how}: {score_line(earlier)}"


def _who() -> str:
    """user@host, as a re-grade records who ran it."""

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"
