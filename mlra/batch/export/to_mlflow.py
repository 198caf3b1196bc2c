"""A run or batch as an MLflow experiment: params, metric histories, artifacts.

The experiment is the task's, `mlra/<task>`: runs of one task exported one by one or in
a batch are runs of one experiment, a searching run's attempts its child runs (MLflow's
`mlflow.parentRunId` tag, which its UI nests under the run).

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

Every key is one MLflow accepts (batch/export/names.py: `a/../../x` becomes `a/__/__/x`);
a run whose names were changed carries the originals, key to name, in its
`mlra.renamed` tag (JSON) and its `renamed.json` artifact. A run MLflow still refuses
is one line in what the export says, and the other runs are written.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path
from typing import Any

from mlra.batch.curves import Series
from mlra.batch.export.names import SafeNames, names_of, text_value, tracker_name
from mlra.batch.export.source import Experiment, ExportRun
from mlra.batch.export.trackers import not_written

PACKAGE = "mlflow"
PIP_NAME = "mlflow-skinny"
"""The client alone, as the `export` extra has it: `mlflow` adds the server's stack."""
DEFAULT_DEST = "mlruns"
_BATCH = 1000
"""MLflow's most metrics in one log_batch call."""
_PARAMS_BATCH = 100
"""And its most params (MAX_PARAMS_TAGS_PER_BATCH)."""
_PARAM_CHARS = 500
"""The value length every MLflow store accepts."""
_TAG_CHARS = 8000
"""MLflow's longest tag value (MAX_TAG_VAL_LENGTH)."""
_EXPERIMENT_CHARS = 500
"""MLflow's longest experiment name."""


def _uri(dest: str) -> str:
    if "://" in dest or dest.startswith("sqlite:"):
        return dest
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    return Path(dest).resolve().as_uri()


def _metrics(run: ExportRun, series: list[Series], keys: SafeNames) -> list[Any]:
    from mlflow.entities import Metric

    out: list[Metric] = []
    for s in series:
        key = keys[s.name]
        for i, p in enumerate(s.points):
            ms = int((run.started_ts + p.wall) * 1000)
            out.append(Metric(key, p.value, ms, p.step if p.step is not None else i))
    for k, p in run.one_offs.items():
        ms = int((run.started_ts + p.wall) * 1000)
        out.append(Metric(keys[k], p.value, ms, p.step if p.step is not None else 0))
    end = int((run.started_ts + run.final.get("duration_s", 0.0)) * 1000)
    out += [Metric(keys[k], v, end, 0) for k, v in run.final.items()]
    return out


def _renamed(run: ExportRun, keys: SafeNames) -> str:
    """The run's changed names as JSON, key to original (ASCII: any name survives)."""
    names = [s.name for s in run.series + run.validations]
    return json.dumps(keys.renamed([*names, *run.one_offs, *run.final, *run.params]))


def _write_run(
    client: Any, experiment_id: str, run: ExportRun, parent_id: str | None, keys: SafeNames
) -> str:
    from mlflow.entities import Param, RunTag

    name = text_value(run.name)
    if "'" not in name:  # a quote would end the filter's string: such a run is not replaced
        for old in client.search_runs([experiment_id], filter_string=f"tags.`mlra.run` = '{name}'"):
            client.delete_run(old.info.run_id)
    tags = {"mlra.run": name, **{f"mlra.{k}": text_value(v) for k, v in run.tags.items()}}
    tags |= _ending_tags(run)
    if parent_id is not None:
        tags["mlflow.parentRunId"] = parent_id
    renamed = _renamed(run, keys)
    if renamed != "{}":
        fits = len(renamed) <= _TAG_CHARS
        tags["mlra.renamed"] = renamed if fits else "too long for a tag: see renamed.json"
    created = client.create_run(
        experiment_id, start_time=int(run.started_ts * 1000), tags=tags, run_name=name
    )
    run_id: str = created.info.run_id
    params = [Param(keys[k], text_value(str(v))[:_PARAM_CHARS]) for k, v in run.params.items()]
    metrics = _metrics(run, run.series + run.validations, keys)
    client.log_batch(run_id, tags=[RunTag("mlra.exported", "true")])
    for i in range(0, len(params), _PARAMS_BATCH):
        client.log_batch(run_id, params=params[i : i + _PARAMS_BATCH])
    if renamed != "{}":
        client.log_text(run_id, renamed + "\n", "renamed.json")
    for i in range(0, len(metrics), _BATCH):
        client.log_batch(run_id, metrics=metrics[i : i + _BATCH])
    for artifact in run.artifacts:
        if artifact.path is not None:
            client.log_artifact(run_id, str(artifact.path))
        elif artifact.text is not None:
            client.log_text(run_id, artifact.text, artifact.name)
    if run.ended.mlflow != "RUNNING":  # a run still going stays RUNNING, with no end time
        end = int((run.started_ts + run.final.get("duration_s", 0.0)) * 1000)
        client.set_terminated(run_id, run.ended.mlflow, end_time=end)
    return run_id


def _ending_tags(run: ExportRun) -> dict[str, str]:
    """How the run ended in words (`mlra.ending`), why a FAILED one failed (`mlra.error`)
    and why an ungraded one was not graded (`mlra.ungraded`): MLflow's status alone
    (batch/export/endings.py) does not say it."""
    tags = {"mlra.ending": run.ended.words}
    if run.ended.error is not None:
        tags["mlra.error"] = run.ended.error
    if run.ungraded is not None:
        tags["mlra.ungraded"] = run.ungraded
    return {k: text_value(v)[:_TAG_CHARS] for k, v in tags.items()}


def experiment_name(task: str) -> str:
    """A task's MLflow experiment (`mlra/<task>`)."""
    return text_value(f"mlra/{task}")[:_EXPERIMENT_CHARS]


def write(experiment: Experiment, dest: str) -> str:
    from mlflow.tracking import MlflowClient

    uri = _uri(dest)
    client = MlflowClient(tracking_uri=uri)
    name = experiment_name(experiment.name)
    found = client.get_experiment_by_name(name)
    experiment_id = found.experiment_id if found is not None else client.create_experiment(name)
    keys = SafeNames(tracker_name, names_of(experiment))
    ids: dict[str, str] = {}
    refused: list[str] = []
    for run in experiment.runs:
        parent = ids.get(run.parent) if run.parent else None
        try:
            ids[run.name] = _write_run(client, experiment_id, run, parent, keys)
        except Exception as exc:  # the client's refusal of one run: said, the rest go on
            refused.append(not_written("MLflow", run.name, exc))
    n = len(ids)
    where = f"MLflow {uri}: experiment {name!r}, {n} run{'s' * (n != 1)}"
    if uri.startswith("file:"):  # MLflow 3 reads its file store only when told it may
        ui = f"MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {uri}"
        if not _full_mlflow():
            # mlflow-skinny (the export extra) has no UI server: its `mlflow ui` fails
            # on a missing flask, so the hint names what serves it.
            ui = f"pip install mlflow, then {ui}"
        where += f" (read it with {ui})"
    return "\n".join([where, *refused])


def _full_mlflow() -> bool:
    """Whether the full mlflow (with its UI server) is installed, not only mlflow-skinny."""
    try:
        importlib.metadata.distribution("mlflow")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
