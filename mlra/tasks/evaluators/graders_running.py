"""The graders running in this process now, each in its sandbox: the resource sampler
counts a run's graders (its validations', its attempts') as the run's own work, since a
grader draws on the run's budget (`run_group`) and, while the agent waits on a
validation, is all the run does; without them the run read as idle while it graded."""

from __future__ import annotations

from pathlib import Path

from mlra.tools.sandbox.base import Sandbox

_RUNNING: set[Sandbox] = set()


def started(box: Sandbox) -> None:
    _RUNNING.add(box)


def ended(box: Sandbox) -> None:
    _RUNNING.discard(box)


def graders_in(folder: Path) -> list[Sandbox]:
    """The graders working in `folder` or below it (a run's folder holds its
    validations' and its attempts' folders)."""
    folder = folder.resolve()
    return [box for box in list(_RUNNING) if box.workspace.is_relative_to(folder)]
