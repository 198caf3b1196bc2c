"""A run or batch as offline Weights & Biases runs: `DEST/wandb/offline-run-*/`, one a
run (and one an attempt, grouped under its run), for `wandb sync` to upload later, or
`wandb beta leet` to read in the terminal.

Offline means offline: no login, no API key read (the process's `WANDB_API_KEY` is
hidden from wandb while the export runs and `WANDB_MODE` is `offline`), no system or
git metadata collected, no console captured. The parameters are the run's config,
the final numbers and the one-off numbers (source.py: `d=128` printed once) its summary,
never a history chart of one dot, and the artifacts (result.json, transcript, event log)
its files. A curve whose points all state a training step is drawn over
`mlra/step`; any other, and the validations, over `mlra/wall_s` (run-clock seconds).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlra.batch.export.source import Experiment, ExportRun

PACKAGE = "wandb"
DEFAULT_DEST = "."
STEP, WALL = "mlra/step", "mlra/wall_s"


_OWN_DIRS = ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR")


@contextmanager
def _offline(folder: Path) -> Iterator[None]:
    """No key and no network while the export runs, and wandb's own files (its service's
    logs, its cache and settings, else under the user's home) kept under the export's
    folder; the environment restored after."""
    names = ("WANDB_API_KEY", "WANDB_MODE", "WANDB_SILENT", *_OWN_DIRS)
    saved = {k: os.environ.get(k) for k in names}
    os.environ.pop("WANDB_API_KEY", None)
    os.environ["WANDB_MODE"] = "offline"
    os.environ["WANDB_SILENT"] = "true"
    for name in _OWN_DIRS:
        os.environ[name] = str(folder / "wandb" / ".mlra" / name.split("_")[1].lower())
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def project_name(name: str) -> str:
    """W&B's project names refuse `/\\#?%:` (and are at most 128 characters)."""
    return re.sub(r"[/\\#?%:]", "_", name)[:128] or "mlra"


def _rows(run: ExportRun) -> list[tuple[float, dict[str, Any]]]:
    rows: list[tuple[float, dict[str, Any]]] = []
    for s in run.series:
        for p in s.points:
            row: dict[str, Any] = {s.name: p.value, WALL: p.wall}
            if p.step is not None:
                row[STEP] = p.step
            rows.append((p.wall, row))
    for s in run.validations:
        rows += [(p.wall, {s.name: p.value, WALL: p.wall}) for p in s.points]
    rows.sort(key=lambda r: r[0])
    return rows


def _write_run(wandb: Any, dest: Path, project: str, run: ExportRun) -> str:
    settings = wandb.Settings(
        mode="offline",
        console="off",
        silent=True,
        save_code=False,
        disable_git=True,
        x_disable_stats=True,
        x_disable_meta=True,
        x_disable_machine_info=True,
        x_save_requirements=False,
    )
    tracked = wandb.init(
        dir=str(dest),
        project=project,
        name=run.name,
        group=run.parent or run.name,
        job_type="attempt" if run.parent else "run",
        config=dict(run.params),
        tags=[f"{k}:{v}"[:64] for k, v in run.tags.items()],
        settings=settings,
    )
    try:
        tracked.define_metric(STEP, hidden=True)
        tracked.define_metric(WALL, hidden=True)
        for s in run.series:
            tracked.define_metric(s.name, step_metric=STEP if s.has_steps else WALL)
        for s in run.validations:
            tracked.define_metric(s.name, step_metric=WALL)
        for _, row in _rows(run):
            tracked.log(row)
        tracked.summary.update({k: p.value for k, p in run.one_offs.items()})
        tracked.summary.update(run.final)
        files = Path(tracked.dir)
        for artifact in run.artifacts:
            if artifact.path is not None:
                shutil.copyfile(artifact.path, files / artifact.name)
            elif artifact.text is not None:
                (files / artifact.name).write_text(artifact.text, encoding="utf-8")
        where = str(Path(tracked.dir).parent)
    finally:
        tracked.finish()
    return where


def write(experiment: Experiment, dest: str) -> str:
    folder = Path(dest).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    with _offline(folder):
        import wandb

        try:
            made = [
                _write_run(wandb, folder, project_name(experiment.name), run)
                for run in experiment.runs
            ]
        finally:
            # finish() returns before wandb-core has written the whole `.wandb` file
            # (seen: a file with only its header): the service's shutdown waits for it.
            wandb.teardown()
    n = len(made)
    return (
        f"W&B offline run{'s' * (n != 1)} in {folder / 'wandb'} (project "
        f"{project_name(experiment.name)!r}, {n} run{'s' * (n != 1)}): "
        f"wandb sync {folder / 'wandb'}/offline-run-* uploads them"
    )
