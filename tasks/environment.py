"""A task's own Python environment (`[environment]` in task.toml, a foreign folder's
requirements): built once per content of its requirements, cached, and used by the
sandbox's `python` and the evaluator's script. Stub: the interface others build on."""

from __future__ import annotations

from pathlib import Path

from mlra.tasks.spec import TaskSpec


def task_python(task: TaskSpec) -> Path | None:
    """The interpreter of `task`'s own environment where it declares one and it is built;
    None: mlra's own interpreter runs the task."""
    del task
    return None
