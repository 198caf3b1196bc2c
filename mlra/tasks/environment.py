"""A task's own Python environment (`[environment]` in task.toml, a foreign folder's
requirements and its benchmark's era pins): built once per content of its
requirements (tasks/env_build.py), cached, and used by the sandbox's `python` and the
evaluator's script. A task that declares none runs on mlra's own interpreter, as it
always did."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlra.tasks.env_build import (
    EnvBuildError,
    EnvRecord,
    ensure,
    env_dir,
    env_key,
    read_record,
)
from mlra.tasks.spec import TaskSpec
from mlra.tasks.task_requirements import RequirementsError, requirement_lines

ENV_HINT = "mlra tasks env PATH builds it and says why not"

_built_here: set[str] = set()
"""Keys of the environments this process built: a run's record says "built now" for
the one its own command line built moments before the run started."""


class TaskEnvError(Exception):
    """A task environment that cannot be had; the message is one line (naming the
    build's log where there is one)."""


@dataclass(frozen=True)
class TaskEnvironment:
    path: Path
    record: EnvRecord
    built_now: bool
    """Built by this process (for the run it starts), not found in the cache."""

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def bin_dir(self) -> Path:
        return self.path / "bin"

    def describe(self) -> str:
        """One line for the run log and the command line: which environment, where, and
        whether this run built it."""
        r = self.record
        n = len(r.requirements)
        shown = ", ".join(r.requirements[:6]) + (f" and {n - 6} more" if n > 6 else "")
        how = (
            f"built now in {r.build_s:.1f} s with {r.builder}"
            if self.built_now
            else f"cached (built {r.built_at} in {r.build_s:.1f} s)"
        )
        line = (
            f"the task's own Python environment {r.key[:12]} ({n} requirement"
            f"{'' if n == 1 else 's'}: {shown}) at {self.path}: {how}"
        )
        if r.replaced:
            line += f"; mlra's {', '.join(r.replaced)} installed in it to agree"
        if r.warnings:
            line += "; warning: " + "; ".join(r.warnings[:4])
        return line


def requirements_of(task: TaskSpec) -> list[str] | None:
    """The task's requirement lines, normalized; None where it declares none."""
    if not task.environment.declared:
        return None
    s = task.environment
    try:
        return requirement_lines(task.root, s.requirements, s.files)
    except RequirementsError as exc:
        raise TaskEnvError(f"{task.name}: {exc}") from None


def ensure_environment(
    task: TaskSpec, *, echo: Callable[[str], object] | None = print
) -> TaskEnvironment | None:
    """The task's environment, built first where the cache has none; None for a task
    that declares no requirements. Raises TaskEnvError."""
    lines = requirements_of(task)
    if lines is None:
        return None
    try:
        record, path, built = ensure(lines, echo=echo, what=f"the environment of {task.name}")
    except EnvBuildError as exc:
        raise TaskEnvError(f"{task.name}: its environment could not be built: {exc}") from None
    if built:
        _built_here.add(record.key)
    return TaskEnvironment(path=path, record=record, built_now=record.key in _built_here)


def built_environment(task: TaskSpec) -> TaskEnvironment | None:
    """The task's environment where it is built; None where it declares none, where its
    requirements cannot be read, or where it is not built yet (nothing is built here)."""
    try:
        lines = requirements_of(task)
    except TaskEnvError:
        return None
    if lines is None:
        return None
    path = env_dir(env_key(lines))
    record = read_record(path)
    if record is None:
        return None
    return TaskEnvironment(path=path, record=record, built_now=record.key in _built_here)


def task_python(task: TaskSpec) -> Path | None:
    """The interpreter of `task`'s own environment where it declares one and it is built;
    None: mlra's own interpreter runs the task."""
    found = built_environment(task)
    return found.python if found is not None else None


def missing_environment(task: TaskSpec) -> str | None:
    """Why a task that declares an environment cannot run in it now, or None: for a
    grader that must not fall back to mlra's own interpreter in silence."""
    if not task.environment.declared or task_python(task) is not None:
        return None
    try:
        requirements_of(task)
    except TaskEnvError as exc:
        return str(exc)
    return f"the environment of {task.name} is not built ({ENV_HINT})"
