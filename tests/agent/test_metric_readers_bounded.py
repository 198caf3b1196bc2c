"""The metric readers hold a bounded state whatever the agent writes, start over on a
rewritten file, and skip a bad line or record with one notice (issue 37): a TensorBoard
tag flood, `[` nested 5,000 deep in a metrics line, an endless line, corrupt records."""

from __future__ import annotations

import json
import os
import shutil
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.metrics.files import READ_BYTES, MetricFiles
from mlra.agent.metrics.jsonl import MAX_JSONL_LINE
from mlra.agent.metrics.recorder import MAX_NAME_CHARS, MetricsRecorder
from mlra.agent.metrics.run_metrics import RunMetrics
from mlra.agent.metrics.tensorboard import MAX_TAG_BYTES, MAX_TAGS, masked_crc32c
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox


def _files(workspace: Path) -> MetricFiles:
    return MetricFiles(LocalSandbox(workspace, SandboxSpec()).open_beneath, lambda: 2.0)


def _read_all(
    files: MetricFiles, path: str, *, scans: int = 0
) -> list[tuple[str, float, int | None]]:
    """Every point the file gives, scan after scan, until a scan gives nothing new
    (and at least `scans` scans)."""
    out: list[tuple[str, float, int | None]] = []
    done = 0
    while (found := files.read([path])) or done < scans:
        out += [(n, v, s) for r in found for n, v, s, _ in r.readings]
        done += 1
    return out


def _event_file(logdir: Path, tags: list[str], *, plugin_bytes: int = 0, steps: int = 1) -> Path:
    """An event file through TensorBoard's own writer: a `loss` scalar at each step, and
    each tag once, a float tensor with plugin metadata: the scalars plugin's, or where
    `plugin_bytes` is set another plugin's of that size (name and content), as a flood
    would write it."""
    from tensorboard.compat.proto import event_pb2 as event_mod
    from tensorboard.compat.proto import summary_pb2 as summary_mod
    from tensorboard.compat.proto import tensor_pb2 as tensor_mod
    from tensorboard.compat.proto import types_pb2 as types_mod
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    event_pb2: Any = event_mod
    summary_pb2: Any = summary_mod
    tensor_pb2: Any = tensor_mod
    types_pb2: Any = types_mod
    writer = EventFileWriter(str(logdir))
    for step in range(steps):
        loss = summary_pb2.Summary.Value(tag="loss", simple_value=4.0 - step)
        summary = summary_pb2.Summary(value=[loss])
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
    for i, tag in enumerate(tags):
        value = summary_pb2.Summary.Value(
            tag=tag, tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[i])
        )
        plugin = value.metadata.plugin_data
        plugin.plugin_name = "p" * (plugin_bytes // 2) if plugin_bytes else "scalars"
        plugin.content = b"c" * (plugin_bytes // 2)
        summary = summary_pb2.Summary(value=[value])
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=i, summary=summary))
    writer.close()
    (path,) = logdir.iterdir()
    return path


def test_a_tensorboard_tag_flood_holds_a_bounded_state_and_a_rewrite_starts_over(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    flood = [f"flood/{i}" for i in range(MAX_TAGS + 200)] + ["x" * (MAX_TAG_BYTES + 1)] * 5
    made = _event_file(tmp_path / "w1", flood, plugin_bytes=4096, steps=3)
    assert made.stat().st_size > 5_000_000
    (workspace / "tb").mkdir(parents=True)
    path = "tb/events.out.tfevents.1.flood"
    shutil.copyfile(made, workspace / path)

    files = _files(workspace)
    tracemalloc.start()
    try:
        points = _read_all(files, path)
        held_now, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The curve is read (the flood's tags are another plugin's: no scalars); the tags
    # are held only up to the cap, and nothing of their plugin metadata (the reader
    # before held every tag's plugin name, 2 KiB each here, and kept it on a rewrite).
    assert points == [("loss", 4.0 - s, s) for s in range(3)]
    assert files.held_bytes() < MAX_TAGS * (MAX_TAG_BYTES + 64) + 64 * 1024
    assert files.held_bytes() < 200 * 1024
    assert held_now < 1024 * 1024, held_now
    (tags_notice,) = files.notices
    assert f"more than {MAX_TAGS:,} tags" in tags_notice

    # Replaced (another inode): read from the start, with none of the old tags held.
    second = _event_file(tmp_path / "w2", [f"second/{i}" for i in range(10)])
    os.replace(second, workspace / path)
    again = _read_all(files, path)
    assert {n for n, _, _ in again} == {"loss"} | {f"second/{i}" for i in range(10)}
    assert files.held_bytes() < 4096
    # Rewritten in place (same inode, truncated and written past the old size between
    # two scans): told apart by its first bytes, read from the start again.
    third = _event_file(tmp_path / "w3", [f"third/{i}" for i in range(20)])
    with (workspace / path).open("r+b") as f:
        f.truncate(0)
        f.write(third.read_bytes())
    assert {n for n, _, _ in _read_all(files, path)} == {"loss"} | {f"third/{i}" for i in range(20)}
    assert len(files.notices) == 1  # the cap was said once


def test_a_corrupt_tensorboard_record_is_skipped_and_the_file_read_on(tmp_path: Path) -> None:
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import (
        masked_crc32c as theirs,
    )

    assert masked_crc32c(b"12345678") == theirs(b"12345678")
    made = _event_file(tmp_path / "w", [], steps=6)
    data = bytearray(made.read_bytes())
    # Walk the records: the first is the file's version, then a loss a step.
    starts: list[int] = []
    pos = 0
    while pos < len(data):
        starts.append(pos)
        pos += 12 + int.from_bytes(data[pos : pos + 8], "little") + 4
    data[starts[2] : starts[2] + 8] = (10**6).to_bytes(8, "little")  # step 1: its length lies
    body = starts[4] + 12
    data[body : body + 8] = b"\xff" * 8  # step 3: its event does not decode
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # Then 12 MiB of zeros (a hole), and the steps again.
    again = made.read_bytes()[starts[1] :]
    (workspace / "events.out.tfevents.2.bad").write_bytes(
        bytes(data) + bytes(3 * READ_BYTES) + again
    )
    files = _files(workspace)
    points = _read_all(files, "events.out.tfevents.2.bad", scans=6)
    assert [s for n, _, s in points if n == "loss"] == [0, 2, 4, 5, 0, 1, 2, 3, 4, 5]
    (notice,) = files.notices
    assert "records that are not TensorBoard events" in notice and "does not check" in notice


async def test_a_line_nested_5000_deep_is_skipped_with_one_notice(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "a").mkdir(parents=True)
    (workspace / "a" / "metrics.jsonl").write_bytes(
        b'{"step": 0, "loss": 3.0}\n'
        + b"[" * 5000
        + b"\n"
        + b'{"step": 1, "loss": "\xff\xfe"}\n'  # invalid UTF-8
        + b'{"step": 2, "loss": 1'
        + b"0" * 400  # an integer past any float
        + b'}\n{"step": 3, "loss": 1.0}\n'
    )
    (workspace / "b.metrics.jsonl").write_text('{"step": 0, "acc": 0.5}\n{"step": 1, "acc": 0.7}\n')
    logged: list[ev.Event] = []
    metrics = RunMetrics(
        logged.append,
        lambda: 1.0,
        LocalSandbox(workspace, SandboxSpec()).open_beneath,
        flush_s=0.0,
    )
    await metrics.spotted(["a/metrics.jsonl", "b.metrics.jsonl"])
    await metrics.close()
    points = {
        (e.source, p.name, p.step, p.value)
        for e in logged
        if isinstance(e, ev.Metrics)
        for p in e.points
    }
    assert points == {
        ("file:a/metrics.jsonl", "loss", 0, 3.0),
        ("file:a/metrics.jsonl", "loss", 3, 1.0),
        ("file:b.metrics.jsonl", "acc", 0, 0.5),
        ("file:b.metrics.jsonl", "acc", 1, 0.7),
    }
    (notice,) = [e for e in logged if isinstance(e, ev.Notice)]
    assert "a/metrics.jsonl" in notice.message and "line 2: nested too deep" in notice.message


def test_an_endless_line_is_skipped_without_being_held(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    path = workspace / "metrics.jsonl"
    with path.open("wb") as f:
        f.write(b'{"step": 0, "loss": 2.0}\n')
        f.truncate(64 * READ_BYTES)  # a 256 MiB line of NULs, sparse, with no newline yet
    files = _files(workspace)
    tracemalloc.start()
    try:
        assert _read_all(files, "metrics.jsonl", scans=70) == [("loss", 2.0, 0)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * READ_BYTES, peak  # one read at a time, never the line
    with path.open("ab") as f:
        f.write(b'tail of the long line\n{"step": 1, "loss": 1.0}\n')
    assert _read_all(files, "metrics.jsonl") == [("loss", 1.0, 1)]
    (notice,) = files.notices
    assert f"longer than {MAX_JSONL_LINE:,} bytes" in notice


def test_a_rewritten_metrics_file_is_read_from_its_start(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    path = workspace / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": i, "loss": 9.0 - i}) + "\n" for i in range(5)))
    files = _files(workspace)
    assert len(_read_all(files, "metrics.jsonl")) == 5
    # The script starts again: a shorter file, then one longer than before.
    path.write_text(json.dumps({"step": 0, "loss": 7.5}) + "\n")
    assert _read_all(files, "metrics.jsonl") == [("loss", 7.5, 0)]
    path.write_text("".join(json.dumps({"step": i, "loss": 6.0 - i}) + "\n" for i in range(9)))
    assert _read_all(files, "metrics.jsonl") == [("loss", 6.0 - i, i) for i in range(9)]
    assert files.notices == []


def test_series_names_past_the_cap_and_bad_lines_are_said_once() -> None:
    logged: list[ev.Event] = []
    recorder = MetricsRecorder(logged.append, lambda: 1.0, flush_s=0.0)
    long_name = "n" * (MAX_NAME_CHARS + 1)
    recorder.job_output("job-1", f"{long_name}=1.0 loss=2.0\n" * 3)
    recorder.job_output("job-1", '{"a": ' + "[" * 1500 + "]" * 1500 + "}\nloss=1.5\n")
    recorder.job_ended("job-1")
    names = {p.name for e in logged if isinstance(e, ev.Metrics) for p in e.points}
    assert names == {"loss"}
    (notice,) = recorder.notices
    assert f"more than {MAX_NAME_CHARS} characters" in notice


def test_more_metric_files_than_followed_are_said_once(tmp_path: Path) -> None:
    from mlra.agent.metrics.files import MAX_FILES

    workspace = tmp_path / "ws"
    workspace.mkdir()
    files = _files(workspace)
    paths = [f"r{i}.metrics.jsonl" for i in range(MAX_FILES + 50)]
    assert sum(files.follow(p) for p in paths) == MAX_FILES
    assert sum(files.follow(p) for p in paths) == MAX_FILES
    (notice,) = files.notices
    assert f"more than {MAX_FILES} metric files" in notice


# --- the other places mlra reads JSON the agent wrote --------------------------------


def test_json_nested_5000_deep_from_the_model_is_an_answer_not_a_crash(tmp_path: Path) -> None:
    from mlra.agent.providers.text_calls import read_text_calls
    from mlra.tasks.evaluators.base import MAX_RESULT_BYTES, _read_result  # pyright: ignore[reportPrivateUsage]
    from mlra.tools.registry import parse_arguments

    deep = "[" * 5000
    # A tool call's arguments: the error observation the model reads.
    arguments, problem = parse_arguments('{"cmd": ' + deep + "}")
    assert arguments is None and problem is not None and "nested too deeply" in problem
    # A call written as text: one problem said, the prose kept.
    found = read_text_calls(
        '<tool_call>{"name": "bash", "arguments": ' + deep + "</tool_call>", ["bash"]
    )
    assert found.calls == [] and found.problems and "nested too deeply" in found.problems[0]
    # The evaluator's result file, written where the evaluated code runs.
    out = tmp_path / "evaluation.json"
    out.write_text(deep)
    with pytest.raises(ValueError, match="deeply nested"):
        _read_result(out)
    out.unlink()
    os.symlink("/etc/hostname", out)
    with pytest.raises(OSError):
        _read_result(out)
    out.unlink()
    with out.open("wb") as f:
        f.truncate(MAX_RESULT_BYTES + 1)
    with pytest.raises(ValueError, match="too large"):
        _read_result(out)
