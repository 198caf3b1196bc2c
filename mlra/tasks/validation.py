"""Validating during a run: the `validate` tool's host side (tools/validate.py).

A validation freezes the artifact as it is now (tools/submission.py, links out
refused), grades the frozen copy with the task's evaluator in the evaluator's own
sandbox (tasks/evaluators/base.py) on the task's validation split, `[validation]
settings` in task.toml, or, for a task without validation data, checks the
artifact's format and the task's rules only. It runs on the run's clock (a
validation's time is working time, and it never outlives the deadline), and the
task's rate limit (`max_calls`, `min_interval` between starts, by the run clock)
is judged from the `validation` events already in the log, so a resumed run keeps
the count. The test split is never graded here. Its time-out is the run's time left;
a search's attempt's is the search's time left, not the attempt's own: one under way as
the attempt's limit falls may go on as its closing validation
(agent/agents/closing_validation.py).

A task that opts in (`grade_best_at_deadline`) keeps the frozen copy of its best
validation so far in the run folder (`validations/<n>/`): a run that reaches its
deadline with nothing submitted is graded on it (agent/loop/evaluation.py).
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mlra import events as ev
from mlra.durations import format_duration, parse_duration
from mlra.tasks.evaluators.base import normalize, run_evaluation
from mlra.tasks.hidden_text import HiddenText
from mlra.tasks.sections import ValidationSettings
from mlra.tasks.spec import TaskSpec
from mlra.tools.artifact_copy import SubmissionRefused
from mlra.tools.sandbox.base import SandboxError
from mlra.tools.sandbox.time_out import TimeOut
from mlra.tools.submission import artifact_digest, freeze, remove_tree

if TYPE_CHECKING:
    from mlra.tools.sandbox.local import IsolationMode
    from mlra.tools.sandbox.run_group import RunGroup

VALIDATIONS_DIR = "validations"
"""In the run folder: one folder per validation, its frozen copy (while kept) and its
evaluation's scratch folder, beside `submission/` and `evaluation/`."""


def refusal(settings: ValidationSettings, past: list[ev.Validation], now: float) -> str | None:
    """Why a validation may not start at run time `now`, given those before it; None
    when it may. Said with when the next one is allowed, for the agent to plan by."""
    if len(past) >= settings.max_calls:
        return (
            f"this run has used all {settings.max_calls} validations the task allows; "
            "no more are possible (submit when the result is ready)"
        )
    allowed = next_allowed(settings, past)
    if allowed is not None and now < allowed:
        return (
            f"validations must start at least {format_duration(settings.min_interval_s)} "
            f"apart on the run clock; the next is allowed in {format_duration(allowed - now)} "
            f"(at run time {format_duration(allowed)})"
        )
    return None


def next_allowed(settings: ValidationSettings, past: list[ev.Validation]) -> float | None:
    """The run time from which the next validation may start (None: any time)."""
    if not past:
        return None
    last = past[-1]
    return max(0.0, last.t - last.duration_s) + settings.min_interval_s


def better(new: ev.Validation, old: ev.Validation | None) -> bool:
    """Whether `new` beats `old` in the metric's direction (or ties it: the later of
    equal scores is kept); a format check (no score) that passes beats any before it,
    the latest passing artifact being the best one."""
    if not new.ok:
        return False
    if old is None or not old.ok:
        return True
    if new.score is None or old.score is None:
        return new.score is not None or old.score is None
    # A tie goes to the later artifact: the agent's latest work at the same score.
    return new.score >= old.score if new.higher_is_better else new.score <= old.score


def best_kept(past: list[ev.Validation], run_dir: Path) -> ev.Validation | None:
    """The best validation whose frozen copy is still in the run folder."""
    best: ev.Validation | None = None
    for validation in past:
        if validation.kept is None or not (run_dir / validation.kept).exists():
            continue
        if best is None or better(validation, best):
            best = validation
    return best


@dataclass(frozen=True)
class UnderWay:
    """A validation running, from the moment it holds the validator: its call, the
    workspace path, the run time it began, and `frozen`, the digest of the copy it
    grades once that copy is made (None: it made none, refused or cut). Under way while
    it still copies: an attempt's limit falling then waits for the copy, rather than
    validating again behind it the same bytes (agent/agents/closing_validation.py)."""

    call_id: str
    artifact: str
    started: float
    frozen: asyncio.Future[str | None]


class RunValidator:
    """The `Validator` a run hands its `validate` tool: the run's parts it needs, read
    at each call (the clock and the log change; a resumed run replaces the clock)."""

    def __init__(
        self,
        task: TaskSpec,
        workspace: Path,
        run_dir: Path,
        *,
        emit: Callable[[ev.Event], object],
        elapsed: Callable[[], float],
        remaining: Callable[[], float],
        past: Callable[[], list[ev.Validation]],
        isolation: IsolationMode = "auto",
        gpus: str | None = None,
        run_group: Callable[[], RunGroup | None] = lambda: None,
        disk_mb: int | None = None,
        on_root_outside: Callable[[str, str], object] | None = None,
    ) -> None:
        self.task = task
        self.workspace = workspace
        self.run_dir = run_dir
        self.emit = emit
        self.elapsed = elapsed
        self.remaining = remaining
        self.moves = True
        """Its time-outs move with the run's deadline: not once bound to a fixed one
        (`bind_to`)."""
        self.past = past
        self.isolation: IsolationMode = isolation
        self.gpus = gpus
        """The run's GPUs (an attempt's share): a validation grades on them."""
        self.run_group = run_group
        """The run's cgroup, read at each call: its grader draws on the run's budget."""
        self.disk_mb = disk_mb
        """The run's `--disk`: its grader's scratch quota follows it (0: none)."""
        self.on_root_outside = on_root_outside
        """Told (what, why) where the grader ran as root outside: the run says it once."""
        self.hidden = HiddenText(task.hidden_paths())
        """What the evaluator says is checked against, before the agent reads it."""
        self._one_at_a_time = asyncio.Lock()
        """Two calls in one turn run in turn: the second is judged by the first's event."""
        self.inherited: dict[str, str] = {}
        """Digests of artifacts that are not this run's own, to whose they are (an
        attempt's: agent/setup/config.py `AttemptSettings.inherited`)."""
        self.closing_calls: set[str] = set()
        """Calls mlra makes itself to close an attempt (agent/agents/attempt_agent.py): the
        attempt's result is validated whatever its worker used of the rate limit."""
        self.under_way: UnderWay | None = None
        """The validation running now, its copy made or still being made: an attempt's,
        as its time limit falls, may go on as its closing validation
        (agent/agents/closing_validation.py)."""

    def bind_to(self, remaining: Callable[[], float]) -> None:
        """Validations end within `remaining()` (seconds), which no raise of the run's
        limit moves: a search's attempt's, within the run's time left, not its own
        (agent/agents/closing_validation.py `attempt_validator`)."""
        self.remaining = lambda: max(0.0, remaining())
        self.moves = False

    def time_out(self) -> TimeOut:
        """A validation's time-out: the evaluator's own, never past the deadline; the
        run raises it with its deadline (no further than the evaluator's own)."""
        own = float(parse_duration(self.task.evaluator.timeout))
        seconds = max(1.0, min(own, self.remaining()))
        return TimeOut(seconds, wanted=own if self.moves else None)

    def calls_left(self) -> tuple[int, float | None]:
        past = self.past()
        left = max(0, self.task.validation.max_calls - len(past))
        return left, next_allowed(self.task.validation, past) if left else None

    async def __call__(
        self,
        path: str,
        *,
        call_id: str,
        workdir: str | None,
        time_outs: list[TimeOut] | None = None,
    ) -> ev.Validation:
        async with self._one_at_a_time:
            loop = asyncio.get_running_loop()
            way = self.under_way = UnderWay(call_id, path, self.elapsed(), loop.create_future())
            try:
                return await self._validate(path, call_id, workdir, time_outs, way)
            finally:
                if not way.frozen.done():
                    way.frozen.set_result(None)
                self.under_way = None

    async def _validate(
        self,
        path: str,
        call_id: str,
        workdir: str | None,
        time_outs: list[TimeOut] | None,
        way: UnderWay,
    ) -> ev.Validation:
        settings = self.task.validation
        past = self.past()
        started = self.elapsed()
        why = None if call_id in self.closing_calls else refusal(settings, past, started)
        if why is not None:
            raise SandboxError(why)
        folder = self.run_dir / VALIDATIONS_DIR / str(len(past) + 1)
        if folder.exists():
            # Left by a validation the run was killed under: not one the log counts.
            await asyncio.to_thread(remove_tree, folder)
        try:
            frozen = await asyncio.to_thread(
                freeze,
                self.workspace,
                path,
                folder / "artifact",
                workdir=workdir,
                max_gb=self.task.evaluator.max_submission_gb,
                originals=self.task.read_only_originals(),
            )
        except SubmissionRefused as exc:
            raise SandboxError(f"{exc}, so nothing was validated") from None
        if (whose := self.inherited.get(frozen.sha256)) is not None:
            await asyncio.to_thread(remove_tree, folder)
            raise SandboxError(self.not_own(frozen.submitted, whose))
        split = settings.split
        limit = self.time_out()
        if time_outs is not None:
            time_outs.append(limit)  # the call's: its run raises them with its deadline
        way.frozen.set_result(frozen.sha256)
        outcome = await run_evaluation(
            self.task,
            frozen.path,
            folder / "evaluation",
            isolation=self.isolation,
            split=split,
            timeout_s=limit,
            gpus=self.gpus,
            run_group=self.run_group(),
            disk_mb=self.disk_mb,
        )
        if self.on_root_outside is not None and "root_outside" in outcome.details:
            self.on_root_outside("the grader's sandbox", str(outcome.details["root_outside"]))
        scored = outcome.ok and not outcome.violations
        score = outcome.score if scored and split == "validation" else None
        metric = self.task.metric
        result = ev.Validation(
            call_id=call_id,
            artifact=path,
            sha256=frozen.sha256,
            split=split,
            ok=scored,
            metric=metric.name if split == "validation" else "",
            higher_is_better=metric.higher_is_better,
            score=score,
            normalized=normalize(score, settings.baseline, settings.top),
            metrics=outcome.metrics if split == "validation" else {},
            violations=outcome.violations,
            error=outcome.error or ("the artifact breaks a rule" if outcome.violations else None),
            duration_s=round(max(0.0, self.elapsed() - started), 3),
            # the time left stopped it (as raised so far), not the evaluator's own time-out
            out_of_time=outcome.timed_out
            and float(limit) < parse_duration(self.task.evaluator.timeout),
        )
        if not result.ok:
            result.told = await asyncio.to_thread(self._told, result)
        kept = self._keep(result, past, frozen.path)
        if kept is not None:
            result.kept = Path(os.path.relpath(kept, self.run_dir)).as_posix()
        self.emit(result)
        return result

    def unchanged(self, path: str) -> str | None:
        """Whose the artifact at `path` in the workspace is, where it is one this run
        inherited, unchanged; None: its own (or none there)."""
        if not self.inherited:
            return None
        digest = self.digest(path)
        return None if digest is None else self.inherited.get(digest)

    def digest(self, path: str) -> str | None:
        """The digest the artifact at `path` would be validated under (None: unreadable,
        or neither a file nor a folder: a pipe's read would wait for a writer forever)."""
        try:
            kind = os.stat(self.workspace / path).st_mode
            if not (stat.S_ISREG(kind) or stat.S_ISDIR(kind)):
                return None
            return artifact_digest(self.workspace / path)[0]
        except OSError:
            return None

    def not_own(self, path: str, whose: str) -> str:
        """Why an inherited artifact is not validated, told to the agent and recorded
        (a notice of kind "inherited_artifact", agent/loop/attempt_finish.py reads it)."""
        why = f"no artifact of its own: the {path} in its workspace is {whose}, unchanged"
        self.emit(ev.Notice(level="warning", message=why, kind="inherited_artifact"))
        return f"{why}, so nothing was validated (write your own artifact first)"

    def _told(self, result: ev.Validation) -> str:
        """Why the validation failed, as the agent may read it: the evaluator's words
        with whatever quotes the task's hidden files withheld."""
        if result.violations:
            shown = [self.hidden.shown(v) or "" for v in result.violations]
            return "it breaks the task's rules: " + "; ".join(shown)
        return self.hidden.shown(result.error) or "no reason given"

    def _keep(self, result: ev.Validation, past: list[ev.Validation], copy: Path) -> Path | None:
        """Keep the frozen copy of the best validation so far, where the task may grade
        it at the deadline; every other copy goes (a run folder does not fill with them)."""
        best = (
            best_kept(past, self.run_dir) if self.task.validation.grade_best_at_deadline else None
        )
        if self.task.validation.grade_best_at_deadline and better(result, best):
            if best is not None and best.kept is not None:
                remove_tree((self.run_dir / best.kept).parent)
            return copy
        remove_tree(copy.parent)
        return None
