"""A run or batch as TensorBoard event files: `DEST/<task>/<run>/` a run (a folder per
task, so `tensorboard --logdir DEST/<task>` compares its runs; an attempt in
`<run>/attempts/<id>/`, TensorBoard's run `<run>/attempts/<id>`), its curves as scalars, its parameters and its one-off
numbers (source.py: `d=128` printed once) as hparams and as a text table (a one-off as
a scalar would be a chart of one dot beside the loss), its artifacts copied beside its
event file. A search's run has the curves of the attempt it submitted (source.py), and a
`curves` text that says so.

Written with TensorBoard's own event-file writer and protos, so neither TensorFlow nor
torch is needed. A point's wall time is the run's start plus its run-clock seconds; a
point without a stated training step is numbered in its series' order. An export
replaces the run's event file from an earlier export into the same folder (TensorBoard
reads every event file in a run's folder, so one kept would show each point twice).

Every tag and hparam is a name batch/export/names.py made safe (no lone surrogate,
which protobuf cannot encode; no control character); a run whose names were changed
has a `renamed` text of each key and its original. The text plugin renders Markdown
(images and links included), so every name and value in the `params` and `renamed`
tables is escaped as report.md's are (batch/report_text.py). A run that cannot be
written is one line in what the export says, and the other runs are written.
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path
from typing import Any

from mlra.batch.export.names import SafeNames, names_of, text_value, tracker_name
from mlra.batch.export.source import Experiment, ExportRun, Param
from mlra.batch.export.trackers import not_written
from mlra.batch.report_text import md_cell

PACKAGE = "tensorboard"
DEFAULT_DEST = "tensorboard"


def _proto(module: str) -> Any:
    """A generated protobuf module (untyped: its classes are made at import)."""
    return importlib.import_module(module)


def _scalar(tag: str, value: float) -> Any:
    Summary = _proto("tensorboard.compat.proto.summary_pb2").Summary
    return Summary(value=[Summary.Value(tag=tag, simple_value=value)])


def _text(tag: str, text: str) -> Any:
    summary_pb2 = _proto("tensorboard.compat.proto.summary_pb2")
    Summary, SummaryMetadata = summary_pb2.Summary, summary_pb2.SummaryMetadata
    TensorProto = _proto("tensorboard.compat.proto.tensor_pb2").TensorProto
    TensorShapeProto = _proto("tensorboard.compat.proto.tensor_shape_pb2").TensorShapeProto

    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
    tensor = TensorProto(
        dtype=7,  # DT_STRING
        string_val=[text.encode("utf-8")],
        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]),
    )
    return Summary(value=[Summary.Value(tag=tag, metadata=metadata, tensor=tensor)])


def _hparams(params: dict[str, Param], keys: SafeNames) -> Any:
    """The hparams plugin's session start, made as its plugin writes it (the plugin's own
    helper needs TensorFlow)."""
    summary_pb2 = _proto("tensorboard.compat.proto.summary_pb2")
    Summary, SummaryMetadata = summary_pb2.Summary, summary_pb2.SummaryMetadata
    plugin_data_pb2 = _proto("tensorboard.plugins.hparams.plugin_data_pb2")

    info = plugin_data_pb2.SessionStartInfo()
    for key, value in params.items():
        slot = info.hparams[keys[key]]
        if isinstance(value, bool):
            slot.bool_value = value
        elif isinstance(value, int | float):
            slot.number_value = float(value)
        else:
            slot.string_value = text_value(value)
    content = plugin_data_pb2.HParamsPluginData(version=0, session_start_info=info)
    metadata = SummaryMetadata(
        plugin_data=SummaryMetadata.PluginData(
            plugin_name="hparams", content=content.SerializeToString()
        )
    )
    return Summary(value=[Summary.Value(tag="_hparams_/session_start_info", metadata=metadata)])


def _table(head: tuple[str, str], rows: dict[str, str] | dict[str, Param]) -> str:
    lines = [f"| {md_cell(k)} | {md_cell(v)} |" for k, v in rows.items()]
    return "\n".join([f"| {head[0]} | {head[1]} |", "| --- | --- |", *lines])


def _write_run(folder: Path, run: ExportRun, keys: SafeNames) -> None:
    Event = _proto("tensorboard.compat.proto.event_pb2").Event
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    folder.mkdir(parents=True, exist_ok=True)
    for earlier in folder.glob("events.out.tfevents.*"):  # this run, exported before
        earlier.unlink()
    writer = EventFileWriter(str(folder))
    start = run.started_ts
    params: dict[str, Param] = dict(run.params)
    for key, p in run.one_offs.items():
        params[key] = int(p.value) if p.value.is_integer() else p.value
    try:
        writer.add_event(Event(wall_time=start, step=0, summary=_hparams(params, keys)))
        table = _table(("parameter", "value"), params)
        writer.add_event(Event(wall_time=start, step=0, summary=_text("params", table)))
        if curves_of := run.tags.get("curves_of"):  # a search's: its attempt's (source.py)
            said = f"The curves and validations are those of the search's {md_cell(curves_of)}."
            writer.add_event(Event(wall_time=start, step=0, summary=_text("curves", said)))
        series = run.series + run.validations
        renamed = keys.renamed([*(s.name for s in series), *params, *run.final])
        if renamed:
            table = _table(("key", "named by the run"), renamed)
            writer.add_event(Event(wall_time=start, step=0, summary=_text("renamed", table)))
        for s in series:
            tag = keys[s.name]
            for i, p in enumerate(s.points):
                step = p.step if p.step is not None else i
                writer.add_event(
                    Event(wall_time=start + p.wall, step=step, summary=_scalar(tag, p.value))
                )
        end = start + run.final.get("duration_s", 0.0)
        for key, value in run.final.items():
            summary = _scalar(f"final/{keys[key]}", value)
            writer.add_event(Event(wall_time=end, step=0, summary=summary))
    finally:
        writer.close()
    for artifact in run.artifacts:
        if artifact.path is not None:
            shutil.copyfile(artifact.path, folder / artifact.name)
        elif artifact.text is not None:
            (folder / artifact.name).write_text(artifact.text, encoding="utf-8")


def write(experiment: Experiment, dest: str) -> str:
    root = Path(dest) / tracker_name(experiment.name).replace("/", "_")
    keys = SafeNames(tracker_name, names_of(experiment))
    refused: list[str] = []
    for run in experiment.runs:
        parts = run.name.split("/")
        if run.parent is not None:  # an attempt: under its run, beside none of its files
            parts = [*run.parent.split("/"), "attempts", parts[-1]]
        try:
            _write_run(root.joinpath(*parts), run, keys)
        except Exception as exc:  # one run's failure: said, the rest go on
            refused.append(not_written("TensorBoard", run.name, exc))
    n = len(experiment.runs) - len(refused)
    where = (
        f"TensorBoard event files in {root} ({n} run{'s' * (n != 1)}): tensorboard --logdir {root}"
    )
    return "\n".join([where, *refused])
