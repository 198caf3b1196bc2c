"""The evaluator interface, and how the host runs one in a fresh, confined process.

Grading never trusts a number the agent reports: the task's evaluator runs on
the submitted artifact (the frozen copy) in a separate Python process started by
the host, in a sandbox of its own (no network unless the task allows it, the
host read-only, only its scratch folder writable) with an environment built
from scratch (no API keys), and its score is what the log and `result.json` record.
The artifact is the agent's, so the evaluator is bounded as the agent's commands
are: the task's memory (else the machine's default, /tmp and /dev/shm counted) and a
disk quota on its scratch folder (the run's `--disk`, else the task's `disk_gb`, else
grader_user.GRADER_DISK_MB),
both recorded in the outcome's details; as root it runs as a host uid of its own
(grader_user.py).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import importlib
import json
import os
import secrets
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

from pydantic import BaseModel, Field

from mlra import events as ev
from mlra.durations import parse_duration
from mlra.lazy_load import load
from mlra.tasks.evaluators import graders_running
from mlra.tasks.evaluators.grader_files import TaskCopies, copied
from mlra.tasks.evaluators.grader_user import (
    Mirrors,
    disk_full_error,
    grader_disk,
    hand_over,
    lend,
    write_after,
)
from mlra.tasks.evaluators.host_tools import host_tools
from mlra.tasks.evaluators.kinds import EVALUATORS
from mlra.tasks.evaluators.progress import TICK_S as PROGRESS_TICK_S
from mlra.tasks.evaluators.progress import ProgressReader
from mlra.tasks.evaluators.stale import (
    EVALUATOR_FILE,
    GRADER_VAR,
    EvaluatorRecord,
    end_stale_evaluator,
    started_at,
)
from mlra.tasks.spec import TaskSpec
from mlra.tools.sandbox import run_uid, trees
from mlra.tools.sandbox.base import ExecResult, Sandbox, SandboxError, SandboxSpec
from mlra.tools.sandbox.default_limits import NO_LIMIT, task_memory
from mlra.tools.sandbox.env import shown_interpreter
from mlra.tools.sandbox.runner import finish_despite_cancel
from mlra.tools.sandbox.start_step import Pending
from mlra.tools.sandbox.time_out import TimeOut

if TYPE_CHECKING:
    from mlra.tools.sandbox.local import IsolationMode
    from mlra.tools.sandbox.run_group import RunGroup


Split = Literal["test", "validation", "format"]
"""What an evaluation grades: the hidden test split (the final grade), the task's
validation split (`[validation] settings` laid over the evaluator's), or the
artifact's format and the task's rules only (a task without validation data)."""


class EvalOutcome(BaseModel):
    ok: bool
    score: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    violations: list[str] = Field(default_factory=list)
    """Rules the submission breaks; a submission that breaks one gets no score."""
    error: str | None = None
    details: dict[str, object] = Field(default_factory=dict)
    timed_out: bool = False  # at its timeout: its own, or the shorter one it was given


class Evaluator(abc.ABC):
    """Grades one artifact for one task. Runs inside the fresh evaluation process."""

    def __init__(self, task: TaskSpec) -> None:
        self.task = task

    @abc.abstractmethod
    def evaluate(self, artifact: Path, *, work_dir: Path) -> EvalOutcome:
        """Score `artifact`; `work_dir` is scratch space outside the workspace."""

    def check_format(self, artifact: Path) -> EvalOutcome:
        """Whether `artifact` has the form this evaluator grades, without grading it
        (no data is read): what `validate` reports for a task without validation data.
        An evaluator that can say more than "it exists" overrides this."""
        if not artifact.exists():
            return EvalOutcome(ok=False, error=f"nothing to check: {artifact.name} does not exist")
        if artifact.is_file() and artifact.stat().st_size == 0:
            return EvalOutcome(ok=False, error=f"{artifact.name} is empty")
        return EvalOutcome(ok=True)


def split_task(task: TaskSpec, split: Split) -> TaskSpec:
    """The task as the evaluator sees it for `split`: for the validation split, the
    validation settings laid over the evaluator's (the test data never named)."""
    if split != "validation" or task.validation.settings is None:
        return task
    evaluator = task.evaluator.model_copy(
        update={"settings": {**task.evaluator.settings, **task.validation.settings}}
    )
    copy = task.model_copy(update={"evaluator": evaluator})
    copy.root = task.root
    return copy


def load_evaluator(task: TaskSpec) -> Evaluator:
    """The task's evaluator, by its kind's line in the table (tasks/evaluators/kinds.py),
    imported only here, in the grading process."""
    cls = cast(type[Evaluator], load(EVALUATORS[task.evaluator.kind].evaluator))
    return cls(task)


def normalize(score: float | None, baseline: float | None, top: float | None) -> float | None:
    """(score - baseline) / (top - baseline): 0 at the baseline, 1 at the top reference
    (top < baseline for a lower-is-better metric)."""
    if score is None or baseline is None or top is None or top == baseline:
        return None
    return (score - baseline) / (top - baseline)


ISOLATION_VAR = "MLRA_EVALUATION_ISOLATION"
"""Set in the evaluation process to how it is confined ("bwrap" or "none"). bubblewrap
cannot nest, so the script evaluator runs its script as a plain child process, held
by the same confinement, and records this as the child's isolation."""

MAX_RESULT_BYTES = 16 * 1024 * 1024
"""The evaluator's result read at most: it is written where the evaluated code runs."""


def _read_result(out: Path) -> object:
    """The result's JSON, never through a link, bounded (ValueError for any other)."""
    fd = os.open(out, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("it is not a regular file")
        return json.loads(trees.read_bounded(fd, MAX_RESULT_BYTES))
    except (trees.TooLarge, RecursionError) as exc:
        raise ValueError(f"it is too large or too deeply nested to read ({exc})") from None
    finally:
        os.close(fd)


def evaluation_env(task: TaskSpec) -> dict[str, str]:
    """The evaluator's environment, built explicitly: nothing secret from the host.

    The sandbox adds PATH, HOME and the offline switches of a task without network;
    these are what the evaluator needs on top.
    """
    env = {
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    for passthrough in (
        "HF_HOME",
        "HF_DATASETS_CACHE",
        # A host that says it is offline is offline for the evaluator too.
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "TRANSFORMERS_OFFLINE",
    ):
        if passthrough in os.environ:
            env[passthrough] = os.environ[passthrough]
    if "HF_HOME" not in env:  # HOME is a fresh one inside: the user's cache is named
        default_cache = Path.home() / ".cache" / "huggingface"
        if default_cache.is_dir():
            env["HF_HOME"] = str(default_cache)
    if not task.resources.network:
        env["HF_HUB_OFFLINE"] = "1"
        env["HF_DATASETS_OFFLINE"] = "1"
        env["TRANSFORMERS_OFFLINE"] = "1"
    # Commands and folders from outside the sandbox's view (Lean, a Lean project).
    env.update(host_tools(task).env)
    if task.environment.declared:
        # The task's own environment is found in the cache by its requirements' hash;
        # HOME is a fresh one inside, so the cache is named to be the same one.
        from mlra.tasks.foreign.common import CACHE_VAR, cache_root

        env[CACHE_VAR] = str(cache_root().resolve())
    return env


def mlra_source_dirs() -> list[Path]:
    """Where the mlra package is imported from: the evaluation process must see it.

    An editable install maps `mlra.agent`, `mlra.tasks`... to folders of the
    checkout, outside the Python environment the sandbox shows.
    """
    import mlra

    dirs = [Path(mlra.__file__).resolve().parent]
    for name in ("agent", "tools", "tasks"):
        module = importlib.import_module(f"mlra.{name}")
        dirs += [Path(p).resolve() for p in getattr(module, "__path__", [])]
    return list(dict.fromkeys(dirs))


def evaluation_spec(task: TaskSpec, artifact: Path, env: dict[str, str]) -> SandboxSpec:
    """Read-only: the task folder, the artifact, mlra's source and the commands and
    folders the evaluator needs from the host; the sandbox adds the system and the
    Python environment. Writable: the scratch folder and the Hugging
    Face cache (datasets write their caches and locks as they load). Other tasks'
    folders, shown with mlra's source in a checkout, are hidden: one grader, one task."""
    from mlra.tasks.environment import built_environment

    root = task.root.resolve()
    shown = [root, artifact.resolve(), *mlra_source_dirs(), *host_tools(task).read_only]
    own = built_environment(task)  # the script runs in it (evaluators/script.py)
    if own is not None:
        shown.append(own.path)
    caches = [
        Path(env[name]).resolve()
        for name in ("HF_HOME", "HF_DATASETS_CACHE")
        if name in env and Path(env[name]).is_dir()
    ]
    others = [
        d
        for d in root.parent.iterdir()
        if d.is_dir() and d.resolve() != root and (d / "task.toml").exists()
    ]
    memory_mb, sources = None, {}
    if task.resources.memory_gb:
        chosen = task_memory(int(task.resources.memory_gb * 1024))
        memory_mb, sources = chosen.mb, {"memory_mb": chosen.source}
    return SandboxSpec(
        network=task.resources.network,
        read_only=list(dict.fromkeys(shown)),
        read_write=list(dict.fromkeys(caches)),
        hide_paths=others,
        memory_mb=memory_mb,
        limit_sources=sources,
    )


def limits_details(box: Sandbox) -> dict[str, object]:
    """What bounded the evaluator, for the outcome's details: its memory, /tmp and
    /dev/shm, and its scratch folder's quota, with where each came from."""
    limits = box.limits
    return limits.model_dump(mode="json", exclude_none=True, exclude={"cpus", "pids"})


async def _flush_now_and_then(reader: ProgressReader) -> None:
    """Log a progress line held back once its time comes, though no output follows."""
    while True:
        await asyncio.sleep(PROGRESS_TICK_S)
        reader.flush()


def _tidy(artifact: Path, mirrors: Mirrors | None, copies: TaskCopies | None) -> None:
    """After the grader: the artifact is mlra's again, its own caches and the copies of
    the task's files it could not read are gone."""
    lend(artifact, None)
    if mirrors is not None:
        mirrors.remove()
    if copies is not None:
        copies.remove()


async def run_evaluation(
    task: TaskSpec,
    artifact: Path,
    work_dir: Path,
    *,
    isolation: IsolationMode = "auto",
    split: Split = "test",
    timeout_s: float | TimeOut | None = None,
    on_progress: Callable[[ev.EvaluationProgress], object] | None = None,
    gpus: str | None = None,
    run_group: RunGroup | None = None,
    disk_mb: int | None = None,
) -> EvalOutcome:
    """Run the task's evaluator on `artifact` in a fresh, confined process. `on_progress`
    gets its latest output line now and then as it grades (evaluators/progress.py).

    `split` says what it grades (the test split unless `validate` asks for the
    validation split or a format check); `timeout_s`, where shorter than the
    evaluator's, bounds it (a validation never outlives the run's deadline); a
    `TimeOut` (a validation's, which its run may raise) is kept but capped at the
    evaluator's own: taken as it was, a longer one let the grading run on past it.
    Never raises for bad artifacts. The process runs in a sandbox of its own
    (bubblewrap: no network unless the task has it, the host read-only, only
    `work_dir` writable; where none can be had it runs unconfined: `isolation: none`).

    `gpus` (a `--gpus` value) are the run's: grading keeps to the GPUs the run was
    given, else to those the host's CUDA_VISIBLE_DEVICES names.
    `run_group`: a validating run's cgroup, the grader's parent: the grader holds what
    the agent made (a 400 MB answer), so it draws on the run's budget, not beside it.
    `disk_mb`: the run's `--disk` (0: none; None: not given), which the grader's scratch
    quota follows as the agent's workspace does (grader_user.grader_disk); a default one,
    half what is left where sandboxes set up meanwhile took the space it was chosen from."""
    from mlra.tools.sandbox.gpu_inventory import host_gpus
    from mlra.tools.sandbox.local import LocalSandbox

    work_dir = work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    busy = await asyncio.to_thread(end_stale_evaluator, work_dir)
    if busy is not None:
        return EvalOutcome(ok=False, error=busy)
    out = work_dir / "evaluation.json"
    out.unlink(missing_ok=True)
    log_path = work_dir / "evaluation.log"
    own = parse_duration(task.evaluator.timeout)
    bound = own if timeout_s is None else timeout_s
    timeout = bound if isinstance(bound, TimeOut) else TimeOut(max(1.0, min(own, bound)))
    timeout.cap(max(1.0, own))
    env = evaluation_env(task)
    spec = evaluation_spec(task, artifact, env)
    spec.gpus = gpus if gpus is not None else host_gpus()
    spec.draw_on(run_group)
    disk = grader_disk(task, work_dir, disk_mb)
    spec.disk_mb = disk.mb if disk.mb is not None else NO_LIMIT
    spec.disk_shrinks = disk_mb is None and not task.resources.disk_gb  # of the space free
    spec.limit_sources["disk_mb"] = disk.source
    mirrors, copies = None, None
    if run_uid.wanted() and isolation != "none":  # a uid of its own: the caches are root's
        mirrors = await asyncio.to_thread(Mirrors.plan, env, work_dir)
        copies = await copied(task.root, work_dir)  # undone where cancelled
        spec.read_only_over = dict(copies.over)
        # none of a cache read-write, nor a cache inside one (datasets' in HF_HOME's):
        # bubblewrap's later read-write bind would open it again over the read-only one
        spec.read_write = [p for p in spec.read_write if not mirrors.holds(p)]
        spec.read_only = [*spec.read_only, *mirrors.originals]
        spec.hide_paths = [*spec.hide_paths, *mirrors.secrets]
    box = LocalSandbox(work_dir, spec, isolation_mode=isolation)
    handing = Pending()
    started = time.monotonic()
    try:
        try:
            await box.start()
            graders_running.started(box)  # the run's sampler counts its processes
            await hand_over(artifact, mirrors, box.host_uid, handing)  # undone if cancelled
        except SandboxError as exc:
            return EvalOutcome(
                ok=False,
                error=f"the evaluator's sandbox could not start: {exc}",
                details={"isolation": box.isolation, "limits": limits_details(box)},
            )
        token = secrets.token_hex(8)
        record = EvaluatorRecord(
            token=token,
            owner_pid=os.getpid(),
            owner_started=started_at(os.getpid()) or 0.0,
            started=time.time(),
        )
        (work_dir / EVALUATOR_FILE).write_text(record.model_dump_json())
        inside = box.workdir
        argv = [
            shown_interpreter(),
            "-m",
            "mlra.tasks.evaluators.runner",
            str(task.root.resolve()),
            str(artifact.resolve()),
            f"{inside}/evaluation.json",
            inside,
            split,
        ]
        env.update({ISOLATION_VAR: box.isolation, GRADER_VAR: token})
        if mirrors is not None:
            mirrors.point(env, inside)
        reader = ProgressReader(on_progress) if on_progress is not None else None
        flushing = asyncio.create_task(_flush_now_and_then(reader)) if reader else None
        try:
            result = await box.exec(
                argv,
                timeout=timeout,
                env=env,
                on_output=(lambda _stream, text: reader.feed(text)) if reader else None,
            )
        except SandboxError as exc:
            return EvalOutcome(
                ok=False,
                error=f"the evaluator could not run: {exc}",
                details={"isolation": box.isolation, "limits": limits_details(box)},
            )
        finally:
            if flushing is not None:
                flushing.cancel()
        if reader is not None:
            # Where it got to, before its score; a display failing must not fail grading.
            with contextlib.suppress(Exception):
                reader.close()
    finally:
        graders_running.ended(box)
        with contextlib.suppress(Exception):
            # a cancelled hand-over's overlays gone; a second cancel skips no close below
            await finish_despite_cancel(handing.ended())
            await box.stop_processes()
            if mirrors is not None:  # before the volume is carried back: not carried
                await asyncio.to_thread(mirrors.remove)
        with contextlib.suppress(Exception):
            await box.close()
        (work_dir / EVALUATOR_FILE).unlink(missing_ok=True)
        await asyncio.to_thread(_tidy, artifact, mirrors, copies)
    write_after(log_path, result.output)
    outcome = _outcome_of(result, out, box, float(timeout), started)
    if result.disk_full and not outcome.ok and disk.mb is not None:
        outcome.error = f"{disk_full_error(disk)} ({outcome.error})"
    return outcome


def _outcome_of(
    result: ExecResult, out: Path, box: Sandbox, timeout: float, started: float
) -> EvalOutcome:
    """The evaluator's result, or why there is none."""
    details: dict[str, object] = {"isolation": box.isolation, "limits": limits_details(box)}
    if box.root_outside is not None:  # the run says it once (agent/loop/root_outside.py)
        details["root_outside"] = box.root_outside
    if result.notes:
        details["sandbox_notes"] = list(result.notes)
    if out.exists():
        try:
            outcome = EvalOutcome.model_validate(_read_result(out))
        except (ValueError, OSError) as exc:
            return EvalOutcome(
                ok=False, error=f"evaluator wrote an unreadable result: {exc}", details=details
            )
        outcome.details.setdefault("isolation", box.isolation)
        outcome.details.update({k: v for k, v in details.items() if k != "isolation"})
        if result.notes and not outcome.ok:
            # The evaluator saw a child die; the sandbox knows why.
            outcome.error = " ".join([outcome.error or "the evaluator failed", *result.notes])
        return outcome
    if result.timed_out:
        error = f"evaluation timed out after {timeout:.0f}s"
        return EvalOutcome(ok=False, error=error, details=details, timed_out=True)
    tail = result.output.strip().splitlines()[-5:]
    took = time.monotonic() - started
    return EvalOutcome(
        ok=False,
        error=f"evaluator exited with status {result.exit_code} after {took:.0f}s: "
        + " | ".join(tail),
        details=details,
    )
