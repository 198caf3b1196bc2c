"""A run or batch as an MLflow experiment: params, metric histories, artifacts.

A folder given as the destination is MLflow's file store (`mlruns/` by default), read
by `mlflow ui --backend-store-uri DIR` and by `MlflowClient`; mlflow-skinny (the lighter
client, which the `export` extra installs) keeps no database of its own, and MLflow 3
asks for `MLFLOW_ALLOW_FILE_STORE` to write that store, which this export sets for
itself. Any tracking URI (`sqlite:///...` with the full mlflow, `http(s)://` for a
server the user names) is used as given: the only way this export reaches a network.

A point without a stated training step is numbered in its series' order (MLflow needs
a step); its time, the run's start plus its run-clock seconds, is its timestamp either
way, so MLflow's relative-time axis shows the run's clock. A one-off number (source.py:
`d=128` printed once) is a metric of one value, as the final numbers are: MLflow's
runs table shows it as a column, and it makes no history chart of one dot. Exporting a run again
replaces its earlier export in the same experiment (found by its `mlra.run` tag).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from pathlib import Path
from typing import Any

from mlra.batch.curves import Series
from mlra.batch.export.source import Experiment, ExportRun

PACKAGE = "mlflow"
DEFAULT_DEST = "mlruns"
_BATCH = 1000
"""MLflow's most metrics in one log_batch call."""
_PARAM_CHARS = 500
"""The value length every MLflow store accepts."""


def metric_key(name: str) -> str:
    """MLflow's keys allow letters, digits, `_-. /` only."""
    return re.sub(r"[^\w\-. /]", "_", name)


def _uri(dest: str) -> str:
    if "://" in dest or dest.startswith("sqlite:"):
        return dest
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    return Path(dest).resolve().as_uri()


def _metrics(run: ExportRun, series: list[Series]) -> list[Any]:
    from mlflow.entities import Metric

    out: list[Metric] = []
    for s in series:
        key = metric_key(s.name)
        for i, p in enumerate(s.points):
            ms = int((run.started_ts + p.wall) * 1000)
            out.append(Metric(key, p.value, ms, p.step if p.step is not None else i))
    for k, p in run.one_offs.items():
        ms = int((run.started_ts + p.wall) * 1000)
        out.append(Metric(metric_key(k), p.value, ms, p.step if p.step is not None else 0))
    end = int((run.started_ts + run.final.get("duration_s", 0.0)) * 1000)
    out += [Metric(metric_key(k), v, end, 0) for k, v in run.final.items()]
    return out


def _write_run(client: Any, experiment_id: str, run: ExportRun, parent_id: str | None) -> str:
    from mlflow.entities import Param, RunTag

    for old in client.search_runs([experiment_id], filter_string=f"tags.`mlra.run` = '{run.name}'"):
        client.delete_run(old.info.run_id)
    tags = {"mlra.run": run.name, **{f"mlra.{k}": v for k, v in run.tags.items()}}
    if parent_id is not None:
        tags["mlflow.parentRunId"] = parent_id
    created = client.create_run(
        experiment_id, start_time=int(run.started_ts * 1000), tags=tags, run_name=run.name
    )
    run_id: str = created.info.run_id
    params = [Param(k, str(v)[:_PARAM_CHARS]) for k, v in run.params.items()]
    metrics = _metrics(run, run.series + run.validations)
    client.log_batch(run_id, params=params, tags=[RunTag("mlra.exported", "true")])
    for i in range(0, len(metrics), _BATCH):
        client.log_batch(run_id, metrics=metrics[i : i + _BATCH])
    for artifact in run.artifacts:
        if artifact.path is not None:
            client.log_artifact(run_id, str(artifact.path))
        elif artifact.text is not None:
            client.log_text(run_id, artifact.text, artifact.name)
    status = run.tags.get("status")
    if status != "unfinished":
        end = int((run.started_ts + run.final.get("duration_s", 0.0)) * 1000)
        client.set_terminated(
            run_id, "FINISHED" if status == "finished" else "FAILED", end_time=end
        )
    return run_id


def write(experiment: Experiment, dest: str) -> str:
    from mlflow.tracking import MlflowClient

    uri = _uri(dest)
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment.name)
    experiment_id = (
        found.experiment_id if found is not None else client.create_experiment(experiment.name)
    )
    ids: dict[str, str] = {}
    for run in experiment.runs:
        parent = ids.get(run.parent) if run.parent else None
        ids[run.name] = _write_run(client, experiment_id, run, parent)
    n = len(experiment.runs)
    where = f"MLflow {uri}: experiment {experiment.name!r}, {n} run{'s' * (n != 1)}"
    if uri.startswith("file:"):  # MLflow 3 reads its file store only when told it may
        ui = f"MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {uri}"
        if not _full_mlflow():
            # mlflow-skinny (the export extra) has no UI server: its `mlflow ui` fails
            # on a missing flask, so the hint names what serves it.
            ui = f"pip install mlflow, then {ui}"
        where += f" (read it with {ui})"
    return where


def _full_mlflow() -> bool:
    """Whether the full mlflow (with its UI server) is installed, not only mlflow-skinny."""
    try:
        importlib.metadata.distribution("mlflow")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
