"""Training metrics read from what runs in the sandbox (agent/metrics/): the common
shapes of training-log lines to the right series and garbage lines to none, metric
files (`metrics.jsonl`, TensorBoard event files) read exactly and confined to the
workspace, a flood of lines thinned to a bounded log, and a whole scripted run whose
background job prints a falling loss recording that loss, falling, as `metrics` events.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop.resources import disk_sizes
from mlra.agent.metrics.files import MetricFiles
from mlra.agent.metrics.log_lines import parse_line
from mlra.agent.metrics.recorder import MetricsRecorder
from mlra.agent.metrics.run_metrics import RunMetrics
from mlra.agent.metrics.tensorboard import TensorBoardReader
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from mlra.tools.sandbox import bwrap as bw
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

# --- lines of output ---------------------------------------------------------------------


def _points(line: str) -> list[tuple[str, float, int | None]]:
    return [(p.name, p.value, p.step) for p in parse_line(line)]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("step 1200 loss 2.79", [("loss", 2.79, 1200)]),
        ("iter 5: loss 2.1", [("loss", 2.1, 5)]),
        ("[step 3] train/loss=0.5", [("train/loss", 0.5, 3)]),
        ("Step 100/1000 | loss 2.5e-3 | lr 3e-4", [("loss", 0.0025, 100), ("lr", 0.0003, 100)]),
        ("global_step=40 loss=1.25 acc=0.5", [("loss", 1.25, 40), ("acc", 0.5, 40)]),
        ("loss=2.31, acc=0.5", [("loss", 2.31, None), ("acc", 0.5, None)]),
        ("eval_loss: 1.9", [("eval_loss", 1.9, None)]),
        ("Epoch 3 | val_accuracy: 0.875", [("val_accuracy", 0.875, None)]),
        (
            "2024-01-01 12:00:00,123 INFO it=7 loss=2.3",
            [("loss", 2.3, 7)],
        ),
        (
            "100%|██████████| 50/50 [00:01<00:00, 25.00it/s, loss=2.31, acc=0.5]",
            [("loss", 2.31, None), ("acc", 0.5, None)],
        ),
        (
            "{'loss': 2.1, 'grad_norm': 0.8, 'learning_rate': 5e-05, 'epoch': 0.5}",
            [
                ("loss", 2.1, None),
                ("grad_norm", 0.8, None),
                ("learning_rate", 5e-05, None),
                ("epoch", 0.5, None),
            ],
        ),
        (
            '{"step": 3, "loss": 1.5, "split": "train", "ok": true, "val": {"acc": 0.25}}',
            [("loss", 1.5, 3), ("val/acc", 0.25, 3)],
        ),
        ("\x1b[32mloss=0.5\x1b[0m", [("loss", 0.5, None)]),
        (
            "100/100 [==============================] - 1s 5ms/step - loss: 0.5000 - "
            "accuracy: 0.9000 - val_loss: 0.6000",
            [("loss", 0.5, None), ("accuracy", 0.9, None), ("val_loss", 0.6, None)],
        ),
        (
            "Epoch 0: 100%|██████████| 50/50 [00:01<00:00, 30.50it/s, v_num=0, train_loss=0.234]",
            [("train_loss", 0.234, None)],
        ),
    ],
)
def test_a_log_line_gives_its_series(line: str, expected: list[Any]) -> None:
    assert _points(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        "/home/user/data/shard_0001.bin",
        "saved to ./checkpoints/step_1200/model.safetensors",
        "2024-01-01 12:00:00",
        "date: 2024-01-02",
        "time=12:30:01",
        "torch 2.1.0",
        "version: 2.1.0",
        "Python 3.11",
        "CUDA 12",
        "Host: 192.168.0.1",
        "Listening on 0.0.0.0 port 8080",
        "Running on http://127.0.0.1:7860",
        "Downloading (…)model.safetensors: 45%|████▌     | 1.2G/2.6G [00:10<00:12, 100MB/s]",
        "Accuracy: 95.5%",
        "Epoch 1/10",
        "sha=0xdeadbeef",
        "commit 3fa2b1c",
        "Total params: 124,439,808",
        "SHLVL=1",
        "Mem:          24047        1234       22000",
        "(fc): Linear(in_features=768, out_features=3072, bias=True)",
        "Namespace(lr=0.001, batch_size=32, epochs=3)",
        "-rw-r--r-- 1 root root 1234 Nov 26 19:00 train.py",
        "total 48",
        "real 0m1.234s",
        "loss=nan",
        "loss: inf",
        "",
        "x" * 5000 + " loss=1.0",
    ],
)
def test_a_garbage_line_gives_nothing(line: str) -> None:
    assert parse_line(line) == []


def _recorder(flush_s: float = 3600.0) -> tuple[MetricsRecorder, list[ev.Metrics]]:
    logged: list[ev.Metrics] = []

    def append(event: ev.Event) -> ev.Event:
        assert isinstance(event, ev.Metrics)
        logged.append(event)
        return event

    return MetricsRecorder(append, lambda: 1.5, flush_s=flush_s), logged


def _series(events: list[ev.Metrics], name: str) -> list[tuple[float, int | None]]:
    return [(p.value, p.step) for e in events for p in e.points if p.name == name]


def test_output_in_chunks_and_redraws_is_read_by_line() -> None:
    recorder, logged = _recorder()
    # Lines split across chunks, and a tqdm bar redrawn with \r (its postfix repeated
    # by redraws that changed nothing) ending in a newline.
    recorder.job_output("job-1", "step 1 lo")
    recorder.job_output("job-1", "ss 3.0\nstep 2 loss 2.5\n")
    bar = "{}%|##| {}/4 [00:01<00:00, loss={}]"
    recorder.job_output("job-1", "\r".join(bar.format(n * 25, n, v) for n, v in
                                           [(1, 2.0), (2, 2.0), (3, 1.5), (4, 1.5)]) + "\n")  # fmt: skip
    recorder.job_output("job-1", "step 5 loss 1.25")  # no newline: read at the job's end
    assert logged == []
    recorder.job_ended("job-1")
    (event,) = logged
    assert (event.source, event.job, event.kind) == ("job:job-1", "job-1", "log")
    assert _series(logged, "loss") == [(3.0, 1), (2.5, 2), (2.0, None), (1.5, None), (1.25, 5)]
    assert all(p.wall == 1.5 for p in event.points)


def test_a_flood_of_lines_is_thinned_to_a_bounded_log() -> None:
    recorder, logged = _recorder(flush_s=0.0)  # flushed at every chunk: the worst case
    lines = 100_000
    chunk = 500
    begun = time.perf_counter()
    for start in range(0, lines, chunk):
        recorder.job_output(
            "job-1",
            "".join(f"step {i} loss {10 / (i + 1):.6f}\n" for i in range(start, start + chunk)),
        )
    recorder.job_ended("job-1")
    took = time.perf_counter() - begun
    kept = _series(logged, "loss")
    thinned = sum(e.thinned for e in logged)
    assert len(kept) + thinned == lines
    assert 1_000 < len(kept) <= 2_200, len(kept)
    # One event a flush, never one a line (and one as it ends: the curve's last point).
    assert len(logged) <= lines // chunk + 1
    steps = [s for _, s in kept if s is not None]
    # Every 2^k-th of the lines, in order: the curve still starts at the start and
    # reaches the end.
    assert len(set(steps)) == len(kept) and steps == sorted(steps)
    assert steps[0] == 0 and steps[-1] > 0.99 * lines
    assert took < 10, took


# --- metric files ------------------------------------------------------------------------


def _files(workspace: Path) -> MetricFiles:
    sandbox = LocalSandbox(workspace, SandboxSpec())
    return MetricFiles(sandbox.open_beneath, lambda: 2.0)


def _found(workspace: Path) -> list[str]:
    found: list[str] = []
    disk_sizes([workspace], found.append)
    return sorted(found)


def test_metrics_jsonl_is_read_exactly_and_incrementally(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "out").mkdir(parents=True)
    path = workspace / "out" / "metrics.jsonl"
    path.write_text(
        json.dumps({"step": 0, "loss": 4.0, "lr": 0.1})
        + "\n"
        + json.dumps({"step": 1, "loss": 3.0})
        + "\nnot json\n"
        + '{"step": 2, "loss": 2.'  # being written: waits for its end
    )
    files = _files(workspace)
    assert _found(workspace) == ["out/metrics.jsonl"]
    (read,) = files.read(_found(workspace))
    assert (read.path, read.kind) == ("out/metrics.jsonl", "jsonl")
    assert read.readings == [("loss", 4.0, 0, 2.0), ("lr", 0.1, 0, 2.0), ("loss", 3.0, 1, 2.0)]
    assert len(files.notices) == 1 and "not JSON" in files.notices[0]
    with path.open("a") as f:
        f.write('5}\n{"step": 3, "loss": 1.0}\nnot json either\n')
    (read,) = files.read(["out/metrics.jsonl"])
    assert [(n, v, s) for n, v, s, _ in read.readings] == [("loss", 2.5, 2), ("loss", 1.0, 3)]
    assert len(files.notices) == 1  # told once
    assert files.read(["out/metrics.jsonl"]) == []  # nothing new


def test_a_link_out_of_the_workspace_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "metrics.jsonl").write_text('{"step": 1, "secret": 42}\n')
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.symlink(outside / "metrics.jsonl", workspace / "metrics.jsonl")
    os.symlink(outside, workspace / "runs")
    (workspace / "inside").mkdir()
    (workspace / "inside" / "real.jsonl").write_text('{"step": 1, "loss": 0.5}\n')
    os.symlink("inside/real.jsonl", workspace / "train.metrics.jsonl")
    files = _files(workspace)
    # The walk does not go down the folder link; the file links are named, and only the
    # one that stays inside the workspace is read.
    assert _found(workspace) == ["metrics.jsonl", "train.metrics.jsonl"]
    read = files.read([*_found(workspace), "runs/metrics.jsonl"])
    assert [(r.path, [x[:3] for x in r.readings]) for r in read] == [
        ("train.metrics.jsonl", [("loss", 0.5, 1)])
    ]


def _write_tensorboard(logdir: Path) -> None:
    """An event file as PyTorch's `add_scalar` and TF2's `tf.summary.scalar` write them,
    with a histogram and a text beside, through TensorBoard's own writer."""
    from tensorboard.compat.proto import event_pb2 as event_mod
    from tensorboard.compat.proto import summary_pb2 as summary_mod
    from tensorboard.compat.proto import tensor_pb2 as tensor_mod
    from tensorboard.compat.proto import types_pb2 as types_mod
    from tensorboard.plugins.histogram import summary_v2 as histogram
    from tensorboard.plugins.scalar import metadata as scalar_metadata
    from tensorboard.plugins.text import summary_v2 as text
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    # The generated protocol-buffer modules carry no type stubs.
    event_pb2: Any = event_mod
    summary_pb2: Any = summary_mod
    tensor_pb2: Any = tensor_mod
    types_pb2: Any = types_mod
    writer = EventFileWriter(str(logdir))
    for step in range(5):
        loss = summary_pb2.Summary.Value(tag="train/loss", simple_value=4.0 - step * 0.5)
        lr = summary_pb2.Summary.Value(
            tag="lr",
            tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[0.01]),
        )
        if step == 0:  # a tag's plugin is written with its first value only
            lr.metadata.CopyFrom(
                scalar_metadata.create_summary_metadata(display_name="", description="")
            )
        summary = summary_pb2.Summary(value=[loss, lr])
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
    for proto in (
        histogram.histogram_pb("weights", [0.1, 0.2, 0.3], buckets=3),
        text.text_pb("note", "not a scalar"),
    ):
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=0, summary=proto))
    writer.close()


def test_a_tensorboard_event_file_is_read_as_tensorboard_reads_it(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing import event_accumulator

    workspace = tmp_path / "ws"
    _write_tensorboard(workspace / "runs" / "exp1")
    (path,) = _found(workspace)
    assert path.startswith("runs/exp1/events.out.tfevents.")
    (read,) = _files(workspace).read([path])
    assert read.kind == "tensorboard"
    mine: dict[str, list[tuple[float, int]]] = {}
    for name, value, step, wall in read.readings:
        assert step is not None and 0.0 <= wall <= 2.0
        mine.setdefault(name, []).append((value, step))

    # TensorBoard's own reader, on the same file.
    acc = event_accumulator.EventAccumulator(str(workspace / path))
    acc.Reload()
    theirs = {tag: [(s.value, s.step) for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    assert theirs["train/loss"] == [(4.0 - s * 0.5, s) for s in range(5)]
    assert mine["train/loss"] == theirs["train/loss"]
    assert [(pytest.approx(v), s) for v, s in mine["lr"]] == [(0.01, s) for s in range(5)]
    assert set(mine) == {"train/loss", "lr"}  # histograms and text are not scalars


def test_a_tensorboard_file_is_read_as_it_grows_and_a_bad_one_gives_one_notice(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    _write_tensorboard(workspace / "tb")
    (path,) = _found(workspace)
    data = (workspace / path).read_bytes()
    # Half the file, then the rest: the record cut in two is read once whole.
    reader = TensorBoardReader()
    half = len(data) // 2
    first = reader.read(data[:half], half)
    assert reader.offset <= half
    second = reader.read(data[reader.offset :], len(data))
    assert reader.offset == len(data)
    assert [(s.tag, s.step) for s in first + second if s.tag == "train/loss"] == [
        ("train/loss", s) for s in range(5)
    ]

    bad = workspace / "events.out.tfevents.123.host"
    bad.write_bytes(b"\xff" * 64)
    files = _files(workspace)
    assert files.read(["events.out.tfevents.123.host"]) == []
    assert files.read(["events.out.tfevents.123.host"]) == []
    assert len(files.notices) == 1 and "not a TensorBoard event file" in files.notices[0]


async def test_a_resumed_run_reads_a_metric_file_on_from_where_its_log_got(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    path = workspace / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.0}\n')
    sandbox = LocalSandbox(workspace, SandboxSpec())

    async def one_process(recorded: list[ev.Event]) -> list[ev.Metrics]:
        logged: list[ev.Metrics] = []

        def append(event: ev.Event) -> ev.Event:
            assert isinstance(event, ev.Metrics)
            logged.append(event)
            return event

        metrics = RunMetrics(append, lambda: 1.0, sandbox.open_beneath)
        metrics.load(recorded)
        await metrics.spotted(_found(workspace))
        await metrics.close()
        return logged

    first = await one_process([])
    assert [(p.step, p.value) for e in first for p in e.points] == [(1, 2.0), (2, 1.0)]
    assert first[-1].offset == path.stat().st_size and first[-1].path == "metrics.jsonl"
    with path.open("a") as f:
        f.write('{"step": 3, "loss": 0.5}\n')
    second = await one_process(list(first))
    assert [(p.step, p.value) for e in second for p in e.points] == [(3, 0.5)]


# --- a whole run -------------------------------------------------------------------------

TRAINER = (
    "for i in $(seq 0 29); do "
    'echo "step $i loss $(awk -v i=$i \'BEGIN { printf "%.4f", 5 * exp(-i / 10) }\')"; '
    "done; "
    'echo \'{"step": 30, "eval_loss": 0.5}\' > metrics.jsonl'
)


@pytest.mark.skipif(bw.find_bwrap() is None, reason="needs bubblewrap")
async def test_a_job_printing_a_falling_loss_records_a_falling_curve(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", {"name": "job_start", "arguments": {"command": TRAINER, "name": "train"}}),
            turn("", call("job_wait", job="train", timeout=120)),
            turn("", call("bash", command="echo 'iter 1: val_loss 0.9'; echo 42 > answer.txt")),
            turn("", call("bash", command="tail -n 3 jobs/job-1.log")),  # not read again
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer", model="openai/test", runs_dir=tmp_path, run_id="m", isolation="bwrap"
        )
        controller = RunController(config, load_task(answer_task), provider)
        controller.prepare()
        await controller.run(agent_for)
    events = read_events(controller.run_dir / "events.jsonl")
    metrics = [e for e in events if isinstance(e, ev.Metrics)]
    job = [e for e in metrics if e.source == "job:job-1"]
    assert job and all(e.job == "job-1" and e.kind == "log" for e in job)
    loss = [(p.step, p.value) for e in job for p in e.points if p.name == "loss"]
    assert [s for s, _ in loss] == list(range(30))
    values = [v for _, v in loss]
    assert values[0] == 5.0 and values == sorted(values, reverse=True) and values[-1] < 0.3
    # The job's points come before its end; the command's from its own output.
    ended = next(e for e in events if isinstance(e, ev.JobEnded))
    assert max(e.seq for e in job) < ended.seq
    command = [e for e in metrics if e.source.startswith("command:")]
    assert [(p.name, p.value, p.step) for e in command for p in e.points] == [("val_loss", 0.9, 1)]
    assert command[0].call_id and command[0].source == f"command:{command[0].call_id}"
    # The metrics.jsonl the job wrote, read at the run's end at the latest.
    files = [e for e in metrics if e.source == "file:metrics.jsonl"]
    assert [(p.name, p.value, p.step) for e in files for p in e.points] == [("eval_loss", 0.5, 30)]
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert all(e.seq < finished.seq for e in metrics)


def test_a_source_past_its_reading_time_has_only_each_pieces_last_line_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading shares the event loop with the console's keys: a source that has used
    its second's reading time has only the last line of each piece of output read, the
    rest counted as thinned and said once, and its curve still reaches its end."""
    from mlra.agent.metrics import recorder as module

    monkeypatch.setattr(module, "READ_S_PER_S", 0.0)
    recorder, logged = _recorder(flush_s=0.0)
    for start in (0, 1000, 2000):
        recorder.job_output(
            "job-1",
            "".join(f"step {i} loss {1 / (i + 1):.6f}\n" for i in range(start, start + 1000)),
        )
    recorder.job_ended("job-1")
    steps = [s for _, s in _series(logged, "loss")]
    assert steps == [999, 1999, 2999]
    assert sum(e.thinned for e in logged) == 3000 - 3
    (notice,) = recorder.notices
    assert "only the last line of each piece of output is read" in notice


@pytest.mark.parametrize(
    "line",
    [
        "model: 0.69M parameters, d=128, layers=2",
        "tokenizer: 2048 tokens; vocab=2048",
        '{"d": 128, "layers": 2}',
        "config: batch_size=32 seq_len=256",
    ],
)
def test_a_settings_line_gives_no_series(line: str) -> None:
    """A script's sizes and settings are not its progress: none of them is a curve the
    Curves view lists (the newcomer saw `a1 d 128`, `a1 layers 2` offered as series)."""
    assert parse_line(line) == []


def test_a_progress_line_keeps_its_other_numbers() -> None:
    assert _points("step 3 loss=2.5 tokens_per_s=1200") == [
        ("loss", 2.5, 3),
        ("tokens_per_s", 1200.0, 3),
    ]
    assert _points("epoch=2 custom=0.4") == [("epoch", 2.0, None), ("custom", 0.4, None)]
