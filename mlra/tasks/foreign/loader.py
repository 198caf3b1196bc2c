"""Reading a foreign task folder as the task.toml it would have: which layout it is, and
that data. `tasks/spec.py`'s `load_task` comes here for a folder with no task.toml and
validates the data as it validates a file, so everything that loads a task by path
(run, show, batches, resume, the evaluator's own process) reads these folders the same
way. Nothing here imports the task format: it is the format that reads this."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlra.tasks.foreign import mlagentbench, mlrcbench
from mlra.tasks.foreign.common import (
    MARKER,
    Layout,
    Marker,
    content_hash,
    prepared_dir,
)
from mlra.tasks.foreign.measurements import measured_baseline
from mlra.tasks.foreign.overlay import OverlayError, apply_overlay, overlay_path
from mlra.tasks.task_requirements import foreign_environment

LAYOUT_NAMES: dict[Layout, str] = {"mlagentbench": "MLAgentBench", "mlrcbench": "MLRC-Bench"}


class ForeignError(Exception):
    """A folder that cannot be read as a foreign task; the message says why."""


def marker(folder: Path) -> Marker | None:
    """The marker of a prepared copy, or None for any other folder."""
    try:
        return Marker.model_validate_json((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None


def detect(folder: Path) -> Layout | None:
    """Which benchmark's layout `folder` has (MLRC-Bench first: its folders also have
    MLAgentBench's env/ and scripts/), or None."""
    found = marker(folder)
    if found is not None:
        return found.layout
    if not folder.is_dir() or (folder / "task.toml").is_file():
        return None
    if mlrcbench.recognizes(folder):
        return "mlrcbench"
    if mlagentbench.recognizes(folder):
        return "mlagentbench"
    return None


def near_miss(folder: Path) -> str | None:
    """What a folder laid out like a benchmark's task (`env/`, `scripts/`) lacks to be
    read as one, or None for any other folder."""
    if not (folder / "env").is_dir() or not (folder / "scripts").is_dir():
        return None
    return (
        "it has env/ and scripts/, but neither scripts/research_problem.txt (an "
        "MLAgentBench task) nor env/main.py and env/methods/ (an MLRC-Bench task)"
    )


def is_foreign(root: Path) -> bool:
    return detect(root) is not None


def recorded_baseline(folder: Path, layout: Layout | None = None) -> float | None:
    """The mean of the baseline runs recorded for a prepared copy, failures left out."""
    layout = layout or detect(folder)
    fails = mlagentbench.failure_values(folder) if layout == "mlagentbench" else []
    return measured_baseline(folder, fails)


def task_name(folder: Path) -> str:
    found = marker(folder)
    return found.name if found is not None else folder.resolve().name


def foreign_data(folder: Path) -> tuple[dict[str, Any], Path]:
    """The task data of a foreign folder, and the folder it is read from: a source folder
    prepared before is read from its prepared copy (where a measured baseline is
    recorded); one never prepared is read as it is (`mlra run` prepares it first:
    tasks/foreign/prepare.py)."""
    folder = folder.resolve()
    layout = detect(folder)
    if layout is None:
        raise ForeignError(f"{folder}: not an MLAgentBench or MLRC-Bench task folder")
    source = folder
    if marker(folder) is None:
        copy = prepared_dir(task_name(folder), content_hash(folder))
        if marker(copy) is not None:
            folder = copy
    found = marker(folder)
    stated = overlay_path(source, found.source if found else None)
    try:
        return apply_overlay(data_of(folder, layout), stated), folder
    except OverlayError as exc:
        raise ForeignError(str(exc)) from None


def data_of(folder: Path, layout: Layout) -> dict[str, Any]:
    module = mlrcbench if layout == "mlrcbench" else mlagentbench
    data = module.spec_data(folder, name=task_name(folder))
    metric = data["metric"]
    if metric["baseline"] is None:  # none published: the mean of the measured runs
        metric["baseline"] = measured_baseline(folder, metric["failure_values"])
    data["environment"] = foreign_environment(folder, layout)  # tasks/task_requirements.py
    return data
