"""A run or batch as offline Weights & Biases runs: `DEST/wandb/offline-run-*/`, one a
run (and one an attempt, grouped under its run: `group=<run id>`, `job_type="attempt"`),
in one project per task (`mlra-<task>`), for `wandb sync` to upload later, or
`wandb beta leet` to read in the terminal.

Offline means offline: no login, no API key read (the process's `WANDB_API_KEY` is
hidden from wandb while the export runs and `WANDB_MODE` is `offline`), no system or
git metadata collected, no console captured. The parameters are the run's config,
the final numbers and the one-off numbers (source.py: `d=128` printed once) its summary,
never a history chart of one dot, and the artifacts (result.json, transcript, event log)
its files. A curve whose points all state a training step is drawn over
`mlra/step`; any other, and the validations, over `mlra/wall_s` (run-clock seconds).

Every key is one batch/export/names.py made safe (no `*` glob, no leading `_`, never
`mlra/step` or `mlra/wall_s` themselves, no lone surrogate, which protobuf cannot
encode); a run whose names were changed has the originals, key to name, in its config
as `mlra.renamed`. A run W&B refuses is one line in what the export says (its partial
offline run finished), and the other runs are written.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlra.batch.export.names import SafeNames, names_of, text_value, wandb_name
from mlra.batch.export.source import Experiment, ExportRun
from mlra.batch.export.trackers import not_written
from mlra.batch.export.wandb_file import drop_exit
from mlra.terminal_text import printable_line

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


def project_name(task: str) -> str:
    """A task's project, `mlra-<task>`: W&B's project names refuse `/\\#?%:` (and are at
    most 128 characters)."""
    return text_value(re.sub(r"[/\\#?%:]", "_", f"mlra-{task}"))[:128]


def _rows(run: ExportRun, keys: SafeNames) -> list[tuple[float, dict[str, Any]]]:
    rows: list[tuple[float, dict[str, Any]]] = []
    for s in run.series:
        for p in s.points:
            row: dict[str, Any] = {keys[s.name]: p.value, WALL: p.wall}
            if p.step is not None:
                row[STEP] = p.step
            rows.append((p.wall, row))
    for s in run.validations:
        rows += [(p.wall, {keys[s.name]: p.value, WALL: p.wall}) for p in s.points]
    rows.sort(key=lambda r: r[0])
    return rows


def _config(run: ExportRun, keys: SafeNames) -> dict[str, Any]:
    """The run's parameters under their keys, and the originals of the changed names
    (escaped as the terminal shows them: a config value is JSON W&B writes as UTF-8)."""
    config: dict[str, Any] = {
        keys[k]: text_value(v) if isinstance(v, str) else v for k, v in run.params.items()
    }
    names = [s.name for s in run.series + run.validations]
    renamed = keys.renamed([*names, *run.one_offs, *run.final, *run.params])
    if renamed:
        config["mlra.renamed"] = {k: printable_line(v) for k, v in renamed.items()}
    return config


def _tags(run: ExportRun) -> list[str]:
    """`key:value` of each of its tags (W&B's are at most 64 characters), and `ungraded`
    for a run `--ungraded` (its notes say why)."""
    tags = [text_value(f"{k}:{v}")[:64] for k, v in run.tags.items()]
    return tags + ["ungraded"] * (run.ungraded is not None)


def _write_run(wandb: Any, dest: Path, project: str, run: ExportRun, keys: SafeNames) -> str:
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
    # The same run is the same W&B run whatever the export: an id of its own name, and
    # the offline copy an earlier export left replaced, so a synced re-export is not a
    # second run beside the first.
    run_id = hashlib.sha256(f"{project}\0{run.name}".encode()).hexdigest()[:16]
    for earlier in (dest / "wandb").glob(f"offline-run-*-{run_id}"):
        shutil.rmtree(earlier, ignore_errors=True)
    tracked = wandb.init(
        id=run_id,
        dir=str(dest),
        project=project,
        name=text_value(run.name),
        group=text_value(run.parent or run.name),
        job_type="attempt" if run.parent else "run",
        config=_config(run, keys),
        tags=_tags(run),
        notes=text_value(run.notes),
        settings=settings,
    )
    try:
        tracked.define_metric(STEP, hidden=True)
        tracked.define_metric(WALL, hidden=True)
        for s in run.series:
            tracked.define_metric(keys[s.name], step_metric=STEP if s.has_steps else WALL)
        for s in run.validations:
            tracked.define_metric(keys[s.name], step_metric=WALL)
        for _, row in _rows(run, keys):
            tracked.log(row)
        tracked.summary.update({keys[k]: p.value for k, p in run.one_offs.items()})
        tracked.summary.update({keys[k]: v for k, v in run.final.items()})
        files = Path(tracked.dir)
        for artifact in run.artifacts:
            if artifact.path is not None:
                shutil.copyfile(artifact.path, files / artifact.name)
            elif artifact.text is not None:
                (files / artifact.name).write_text(artifact.text, encoding="utf-8")
        where = str(Path(tracked.dir).parent)
    finally:
        # A run with no exit (still going, or its mlra killed) is finished as ended, its
        # exit record dropped from the file after (wandb_file.py).
        tracked.finish(exit_code=run.ended.wandb_exit or 0)
    return where


def write(experiment: Experiment, dest: str) -> str:
    folder = Path(dest).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    with _offline(folder):
        import wandb

        keys = SafeNames(wandb_name, names_of(experiment), reserved=(STEP, WALL))
        made: list[str] = []
        refused: list[str] = []
        unended: list[Path] = []
        try:
            for run in experiment.runs:
                try:
                    where = _write_run(wandb, folder, project_name(experiment.name), run, keys)
                except Exception as exc:  # one run's failure: said, the rest go on
                    refused.append(not_written("W&B", run.name, exc))
                    continue
                made.append(where)
                if run.ended.wandb_exit is None:  # W&B's Running, or Crashed once synced
                    unended += Path(where).glob("run-*.wandb")
        finally:
            # finish() returns before wandb-core has written the whole `.wandb` file
            # (seen: a file with only its header): the service's shutdown waits for it.
            wandb.teardown()
        for path in unended:
            drop_exit(path)
    n = len(made)
    where = (
        f"W&B offline run{'s' * (n != 1)} in {folder / 'wandb'} (project "
        f"{project_name(experiment.name)!r}, {n} run{'s' * (n != 1)}): "
        f"wandb sync {folder / 'wandb'}/offline-run-* uploads them"
    )
    return "\n".join([where, *refused])
