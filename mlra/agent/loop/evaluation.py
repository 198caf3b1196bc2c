"""The end of a run that is graded: stop every process, freeze the artifact,
record the submission, and grade the frozen copy on the host.

Stopping comes first: a daemon the agent left running must not be able to
change the artifact while it is copied, nor after (it is the copy that is graded).
"""

from __future__ import annotations

import asyncio
import dataclasses
from functools import partial

from mlra import events as ev
from mlra.agent.loop.attempts import ATTEMPTS_DIR
from mlra.agent.loop.ending import Ending
from mlra.agent.loop.root_outside import tell_root_outside
from mlra.agent.loop.run_context import RunContext
from mlra.agent.record.state import RunState
from mlra.agent.setup.sandboxes import run_gpus
from mlra.tasks.validation import RunValidator, best_kept


def run_validator(run: RunContext) -> RunValidator:
    """The `validate` tool's host side for this run: on its clock, into its log, with its
    validations so far (a resumed run's included) counted against the rate limit."""
    validator = RunValidator(
        run.task,
        run.workspace,
        run.run_dir,
        emit=run.emit,
        elapsed=lambda: run.clock.elapsed(),
        remaining=lambda: run.clock.remaining(),
        past=lambda: list(run.state.validations),
        isolation=run.config.isolation,
        gpus=run_gpus(run.task, run.config.gpus),
        run_group=lambda: run.sandbox.spec.run_group if run.sandbox is not None else None,
        disk_mb=run.config.disk_mb,
        on_root_outside=partial(tell_root_outside, run),
    )
    if run.config.attempt is not None:  # what it began with is not its own
        validator.inherited = dict(run.config.attempt.inherited)
    return validator


def best_validated(run: RunContext, ending: Ending) -> ev.Validation | None:
    """What a run that reached its deadline with nothing submitted is graded on, where
    its task opts in: its best validation whose frozen copy was kept. None otherwise
    (the default stays the workspace's artifact)."""
    if ending.by != "deadline" or not run.task.validation.grade_best_at_deadline:
        return None
    return best_kept(run.state.validations, run.run_dir)


def submitted_attempt(run: RunContext, ending: Ending) -> ev.AttemptFinished | None:
    """The attempt a search's ending grades: the one submitted, else, for a run that
    searched and ended with nothing submitted (the deadline, a budget, a stop), its best
    validated attempt. None: the run's own workspace is graded."""
    tree = run.state.attempts
    if ending.attempt is not None:
        node = tree.get(ending.attempt)
        return node.finished if node is not None else None
    if ending.reason == "submitted" or not tree:
        return None
    for node in tree.ranked():
        if node.finished is not None and node.finished.kept is not None:
            if (run.run_dir / node.finished.kept).exists():
                return node.finished
    return None


def nothing_validated(run: RunContext, ending: Ending) -> Ending | None:
    """The ending of a search that a deadline, a budget or a stop ended with nothing
    submitted and no attempt validated: not graded, and saying so. None for any other.

    Its own workspace is the starter, which no attempt worked in: grading it (as a line of
    work's deadline grades its workspace) scored what the search never touched, or a
    starter's own artifact. Nor is an attempt's unvalidated workspace graded in its
    stead: the greedy policy ending on its own with nothing validated grades nothing
    (as AIDE, with no good node, submits nothing), and a deadline must not give the
    same search a score that its own ending would not. Those that hold the artifact are
    named, with how to grade one apart (`mlra eval`, kept beside the run's result)."""
    if not ending.evaluate or run.config.search == "none" or run.config.attempt is not None:
        return None
    if ending.attempt is not None or submitted_attempt(run, ending) is not None:
        return None
    tree = run.state.attempts
    if not tree:
        why = "no attempt was started, so nothing was graded"
    elif len(tree) == 1:
        why = "its one attempt was not validated, so nothing was graded"
    else:
        why = f"none of its {len(tree)} attempts was validated, so nothing was graded"
    artifact = run.task.evaluator.artifact
    holding = [
        a for a in tree.nodes if (run.run_dir / ATTEMPTS_DIR / a / "workspace" / artifact).exists()
    ]
    if holding:
        whose = ", ".join(holding[:-1]) + (" and " if len(holding) > 1 else "") + holding[-1]
        one = run.run_dir / ATTEMPTS_DIR / holding[-1]
        why += (
            f" ({whose} {'hold' if len(holding) > 1 else 'holds'} {artifact}, unvalidated: "
            f"`mlra eval {one} --path {artifact}` grades {'one' if len(holding) > 1 else 'it'} apart)"
        )
    return dataclasses.replace(ending, evaluate=False, message=f"{ending.finished_message}: {why}")


async def evaluate(run: RunContext, ending: Ending) -> None:
    from mlra.tasks.grading import grade_artifact
    from mlra.tools.artifact_copy import SubmissionRefused
    from mlra.tools.submission import SUBMISSION_DIR, describe_error, freeze

    workdir = None
    if run.sandbox is not None:
        workdir = run.sandbox.workdir
        try:
            await run.sandbox.stop_processes()
        except Exception as exc:
            run.append(
                ev.Notice(
                    level="warning",
                    message=f"the sandbox's processes could not all be stopped before the "
                    f"submission was copied: {exc}",
                )
            )
    attempt = submitted_attempt(run, ending)
    if attempt is not None:
        await _grade_attempt(run, ending, attempt)
        return
    best = best_validated(run, ending)
    if best is not None and best.kept is not None:
        await _grade_best_validated(run, ending, best, best.kept)
        return
    label = ending.path or run.task.evaluator.artifact
    frozen, problem = None, None
    try:
        frozen = await asyncio.to_thread(
            freeze,
            run.workspace,
            label,
            run.run_dir / SUBMISSION_DIR,
            workdir=workdir,
            max_gb=run.task.evaluator.max_submission_gb,
            originals=run.task.read_only_originals(),
        )
    except SubmissionRefused as exc:
        problem = str(exc)
    except Exception as exc:
        # freeze turns its failures into refusals; whatever else escapes must still
        # end in a recorded evaluation, never an "internal error" with none.
        problem = f"the submission could not be copied out of the workspace: {describe_error(exc)}"
    frozen_rel = frozen.path.relative_to(run.run_dir).as_posix() if frozen else None
    run.emit(
        ev.Submission(
            path=ending.path,
            note=ending.note,
            by=ending.by,
            frozen=frozen_rel,
            sha256=frozen.sha256 if frozen else None,
            size_bytes=frozen.size_bytes if frozen else None,
        )
    )
    _, finished = await grade_artifact(
        run.task,
        label,
        frozen.path if frozen else None,
        run.run_dir / "evaluation",
        problem=problem,
        graded=frozen_rel,
        sha256=frozen.sha256 if frozen else None,
        on_start=run.emit,
        on_progress=run.emit,
        isolation=run.config.isolation,
        restored_read_only=frozen.restored if frozen else None,
        gpus=run_gpus(run.task, run.config.gpus),
        disk_mb=run.config.disk_mb,
        on_root_outside=partial(tell_root_outside, run),
    )
    if run.state.sandbox is not None:
        finished.agent_isolation = run.state.sandbox.isolation
    if finished.restored_read_only:
        run.emit(
            ev.Notice(
                level="warning",
                message="the agent had changed the task's read-only "
                + ", ".join(finished.restored_read_only)
                + "; the task's originals were put back in the graded copy",
            )
        )
    run.emit(finished)
    if run.config.model == "baseline":
        # A foreign task's baseline, where its benchmark publishes none, is this score,
        # if this run measured the starter as its recipe runs it: a recipe that failed,
        # one the user changed or ended early, or a grading that failed records nothing,
        # and says why.
        from mlra.tasks.foreign.baselines import record_measured_baseline

        note = record_measured_baseline(
            run.task,
            finished.score if finished.ok else None,
            run_id=run.run_id,
            problem=(
                _not_the_recipe(run, ending) or _recipe_problem(run) or _grading_problem(finished)
            ),
            shared_by=run.config.machine_shared_by,
        )
        if note is not None:
            level = "warning" if note.startswith("no baseline") else "info"
            run.emit(ev.Notice(level=level, message=note))


def _recipe_problem(run: RunContext) -> str | None:
    """Which recipe step failed, from the plan the baseline agent kept (its events)."""
    failed = [s for s in run.state.plan if s.status == "failed" and s.id != "validate"]
    if not failed:
        return None
    return f"the recipe failed at '{failed[0].title}', so the starter was not measured"


def _not_the_recipe(run: RunContext, ending: Ending) -> str | None:
    """Why this run did not measure the unchanged starter as its recipe runs it, if it
    did not: a baseline is what every later run's success is judged against, so a step
    the user changed at a breakpoint (an edit that changed its arguments, a rejection),
    a fork (its workspace restored from another run's record, and `--edit-action` can
    change a step), or a recipe that never reached its submit step (the user stopped
    it) measures something else. The `validate` step is left out: what it says does
    not change what is submitted."""
    s = run.state
    if (what := _changed_step(s)) is not None:
        return f"the user {what} a recipe step, so the starter was not measured as it is"
    if s.forked_from is not None:
        return (
            f"this run is a fork of {s.forked_from}, its workspace restored from that run's "
            "record, so it did not measure the starter as a baseline run sets it up"
        )
    if ending.reason != "submitted":
        return (
            f"the run ended before its recipe did: {ending.finished_message}; "
            "the starter was not measured"
        )
    return None


def _changed_step(s: RunState) -> str | None:
    """ "edited" or "rejected" where the user changed a recipe step (not `validate`) at a
    breakpoint; an edit saved unchanged is no change."""
    calls = {**s.ended_calls, **s.running}
    for call_id, arguments in s.edited_calls.items():
        call = calls.get(call_id)
        if call is None or (call.tool != "validate" and call.arguments != arguments):
            return "edited"
    for call_id in s.rejected_calls:
        call = calls.get(call_id)
        if call is None or call.tool != "validate":
            return "rejected"
    return None


def _grading_problem(finished: ev.EvaluationFinished) -> str | None:
    if finished.ok and finished.score is not None:
        return None
    return f"the grading failed: {finished.error or 'no score'}"


async def _grade_attempt(run: RunContext, ending: Ending, attempt: ev.AttemptFinished) -> None:
    """Grade an attempt's frozen copy (the one its score was earned on), recorded as such."""
    assert attempt.kept is not None
    if ending.attempt is not None:
        note = ending.note or f"attempt {attempt.attempt}"
    else:
        note = (
            f"the best validated attempt ({attempt.attempt}), graded as the run ended with "
            "nothing submitted"
        )
    submission = ev.Submission(
        path=attempt.artifact or run.task.evaluator.artifact,
        note=note,
        by=ending.by,
        frozen=attempt.kept,
        sha256=attempt.sha256,
        attempt=attempt.attempt,
    )
    await _grade_kept(run, submission)


async def _grade_best_validated(
    run: RunContext, ending: Ending, best: ev.Validation, kept: str
) -> None:
    """Grade the kept copy of the run's best validation, recorded as such."""
    submission = ev.Submission(
        path=best.artifact,
        note=f"the best validated artifact (validation {best.call_id}), graded at the "
        "deadline with nothing submitted",
        by=ending.by,
        frozen=kept,
        sha256=best.sha256,
        best_validation=best.call_id or "",
    )
    await _grade_kept(run, submission)


async def _grade_kept(run: RunContext, submission: ev.Submission) -> None:
    """Record `submission`, a copy frozen earlier and kept in the run folder (its
    `frozen`), with its size, and grade that copy on the test split."""
    from mlra.tasks.grading import grade_artifact
    from mlra.tools.submission import artifact_digest

    assert submission.frozen is not None and submission.path is not None
    path = run.run_dir / submission.frozen
    _, submission.size_bytes = await asyncio.to_thread(artifact_digest, path)
    run.emit(submission)
    _, finished = await grade_artifact(
        run.task,
        submission.path,
        path,
        run.run_dir / "evaluation",
        graded=submission.frozen,
        sha256=submission.sha256,
        on_start=run.emit,
        on_progress=run.emit,
        isolation=run.config.isolation,
        gpus=run_gpus(run.task, run.config.gpus),
        disk_mb=run.config.disk_mb,
        on_root_outside=partial(tell_root_outside, run),
    )
    if run.state.sandbox is not None:
        finished.agent_isolation = run.state.sandbox.isolation
    run.emit(finished)
