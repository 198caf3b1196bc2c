"""A training script's one-off numbers are no curves, in the report and the exports
alike (agent/metrics/one_off.py): tiny-lm's train.py prints `tokenizer: 2048 tokens`
and `model: 0.69M parameters, d=128, layers=2` before its `step N/300 loss X valid Y`
lines, and `mlra batch --tasks tiny-lm` drew panels loss, d, layers and tokenizer (three
dots) and left its `valid` curve out. Those lines are no progress lines and give no
series now (agent/metrics/log_lines.py); a script that logs its settings on a progress
line (a JSON line with a step) still gives one-off numbers, which these runs' jobs also
print. The lines are fed through the real recorder into real run logs; nothing trains."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.metrics.one_off import is_curve
from mlra.agent.metrics.recorder import MetricsRecorder
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog
from mlra.agent.record.run_result import write_result
from mlra.agent.record.state import RunState
from mlra.batch.export.source import read_experiment
from mlra.batch.report import write_report
from mlra.batch.report_curves import panel_names, read_curves
from mlra.batch.report_rows import collect
from mlra.console.cli.cli import main
from mlra.console.text.curves_data import CurveSet
from tests.console.test_export import _wandb_records


def tiny_lm_output(seed: int) -> list[str]:
    """What tiny-lm's baseline (`python train.py --out submission --seed N`, its
    defaults: 300 steps, an evaluation every 100) prints, as its format strings write it."""
    drop = 0.01 * seed
    return [
        "tokenizer: 2048 tokens; train 1,048,576 tokens, valid 65,536",
        "model: 0.69M parameters, d=128, layers=2",
        '{"step": 0, "tokenizer": 2048, "d": 128, "layers": 2}',
        f"step 100/300 loss {5.912 - drop:.3f} (20s) valid {5.874 - drop:.3f}",
        f"step 200/300 loss {5.101 - drop:.3f} (40s) valid {5.122 - drop:.3f}",
        f"step 300/300 loss {4.873 - drop:.3f} (60s) valid {4.951 - drop:.3f}",
        "saved to submission after 61s",
    ]


def _tiny_lm_run(
    runs: Path, name: str, seed: int, lines: list[str] | None = None, task: str = "tiny-lm"
) -> Path:
    """A finished baseline run of tiny-lm whose job printed `lines` (by default
    `tiny_lm_output(seed)`), read by the run's own MetricsRecorder, the run clock
    advancing a second a line."""
    run_dir = runs / name
    log = EventLog(run_dir / EVENTS_FILE)
    state = RunState()
    log.subscribe(state.apply)
    sandbox = ev.SandboxInfo(
        kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/w"
    )
    log.append(
        ev.RunStarted(
            run_id=name,
            task=task,
            task_title="A tiny language model",
            model="baseline",
            limits=ev.Limits(time_limit_s=3600, max_steps=50),
            sandbox=sandbox,
            config={"seed": seed},
        )
    )
    log.append(ev.JobStarted(job="job-1", command="python train.py", log="jobs/job-1.log"))
    ticks: Iterator[float] = iter(float(t) for t in range(1, 1000))
    recorder = MetricsRecorder(log.append, lambda: next(ticks))
    for line in tiny_lm_output(seed) if lines is None else lines:
        recorder.job_output("job-1", line + "\n")
    recorder.job_ended("job-1")
    recorder.close()
    log.append(ev.Submission(path="submission"))
    log.append(ev.EvaluationFinished(ok=True, metric="accuracy", score=0.6, normalized=0.2))
    log.append(ev.RunFinished(status="finished", reason="submitted"))
    log.close()
    write_result(state, run_dir)
    return run_dir


@pytest.fixture(scope="module")
def batch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`mlra batch --tasks tiny-lm --models baseline --seeds 1,2`'s folder, as written."""
    batch = tmp_path_factory.mktemp("batch") / "b1"
    for seed in (1, 2):
        _tiny_lm_run(batch / "runs", f"tiny-lm__baseline__s{seed}", seed)
    (batch / "batch.json").write_text("{}", encoding="utf-8")
    return batch


def _series(run_dir: Path) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for line in (run_dir / EVENTS_FILE).read_text().splitlines():
        event = ev.parse_event(line)
        if isinstance(event, ev.Metrics):
            for p in event.points:
                found.setdefault(p.name, []).append(p.value)
    return found


def test_the_rule_is_whether_the_values_change() -> None:
    assert not is_curve([])
    assert not is_curve([128.0])  # `d=128`, printed once
    assert not is_curve([32.0, 32.0, 32.0])  # `"batch_size": 32` on every line
    assert is_curve([5.9, 5.1, 4.9])
    assert is_curve([0.0, 0.0, 0.1])


def test_the_report_draws_loss_and_valid_and_lists_the_one_off_numbers(batch_dir: Path) -> None:
    # The prose lines give nothing; the JSON line's settings are series of one reading.
    read = _series(batch_dir / "runs" / "tiny-lm__baseline__s1")
    assert read == {
        "tokenizer": [2048.0],
        "d": [128.0],
        "layers": [2.0],
        "loss": [5.902, 5.091, 4.863],
        "valid": [5.864, 5.112, 4.941],
    }
    write_report(batch_dir)
    assert panel_names(read_curves(batch_dir, collect(batch_dir, "first"))) == ["loss", "valid"]
    assert (batch_dir / "curves-tiny-lm.png").stat().st_size > 5000

    report = json.loads((batch_dir / "report.json").read_text())
    kinds = {s["name"]: s["curve"] for s in report["curves"][0]["series"]}
    assert kinds == {"tokenizer": False, "d": False, "layers": False, "loss": True, "valid": True}

    md = (batch_dir / "report.md").read_text()
    section = md[md.index("## Training curves") :]
    curves, once = section.split("One-off numbers", 1)
    assert "| tiny-lm__baseline__s1 | loss | job:job-1 | 3 | 5.902 → 4.863 |" in curves
    assert "| tiny-lm__baseline__s1 | valid | job:job-1 | 3 | 5.864 → 4.941 |" in curves
    assert not any(f"| {n} |" in curves for n in ("d", "layers", "tokenizer"))
    assert "| tiny-lm__baseline__s2 | d | job:job-1 | 128 | 1 |" in once
    assert "| tiny-lm__baseline__s1 | tokenizer | job:job-1 | 2048 | 1 |" in once
    assert "| loss |" not in once


def test_the_exports_chart_loss_and_valid_and_keep_the_one_offs_as_numbers(
    batch_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    experiment = read_experiment(batch_dir)
    run = experiment.runs[0]
    assert [s.name for s in run.series] == ["loss", "valid"]
    assert {k: p.value for k, p in run.one_offs.items()} == {
        "tokenizer": 2048.0,
        "d": 128.0,
        "layers": 2.0,
    }

    # TensorBoard: a scalar chart a curve; the one-offs beside the parameters.
    assert main(["export", str(batch_dir), "--to", "tensorboard", "--dest", str(tmp_path)]) == 0
    acc = EventAccumulator(str(tmp_path / "tiny-lm" / "tiny-lm__baseline__s1"))
    acc.Reload()
    charts = {t for t in acc.Tags()["scalars"] if not t.startswith("final/")}
    assert charts == {"loss", "valid"}
    assert [s.step for s in acc.Scalars("valid")] == [100, 200, 300]
    params = acc.Tensors("params")[0].tensor_proto.string_val[0].decode()
    assert "| d | 128 |" in params and "| tokenizer | 2048 |" in params

    # W&B: the curves in the run's history, the one-offs in its summary only.
    capsys.readouterr()
    assert main(["export", str(batch_dir), "--to", "wandb", "--dest", str(tmp_path)]) == 0
    histories: list[dict[str, Any]] = []
    summaries: dict[str, Any] = {}

    def items(update: Any) -> dict[str, Any]:
        return {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in update}

    for log in (tmp_path / "wandb").glob("offline-run-*/run-*.wandb"):
        for r in _wandb_records(log):
            kind = r.WhichOneof("record_type")
            if kind == "history":
                histories.append(items(r.history.item))
            elif kind == "summary":
                summaries.update(items(r.summary.update))
    charted = {k for row in histories for k in row if not k.startswith(("mlra/", "_"))}
    assert charted == {"loss", "valid"}
    assert summaries["d"] == 128 and summaries["layers"] == 2 and summaries["tokenizer"] == 2048


def test_the_curves_view_tells_them_apart_by_the_same_rule(batch_dir: Path) -> None:
    events = [
        ev.parse_event(line)
        for line in (batch_dir / "runs" / "tiny-lm__baseline__s1" / EVENTS_FILE)
        .read_text()
        .splitlines()
    ]
    curves = CurveSet().feed_all(events)
    assert {s.name for s in curves.series.values() if s.is_curve} == {"loss", "valid"}


def test_a_run_that_stopped_early_still_meets_the_others_on_their_charts(
    tmp_path: Path,
) -> None:
    """A name is a curve where it moves in any run shown together: a run stopped after
    its first evaluation lays its one reading of `loss` over the others' (a dot on the
    panel, a point of the tracker's chart); a task whose runs all stopped before a step
    gets no PNG, only its one-off numbers listed."""
    batch = tmp_path / "b"
    _tiny_lm_run(batch / "runs", "tiny-lm__baseline__s1", 1)
    _tiny_lm_run(batch / "runs", "tiny-lm__baseline__s2", 2, tiny_lm_output(2)[:4])
    crashed = tiny_lm_output(3)[:3]
    _tiny_lm_run(batch / "runs", "other__baseline__s3", 3, crashed, task="other")
    (batch / "batch.json").write_text("{}", encoding="utf-8")

    stopped = next(r for r in read_experiment(batch).runs if r.name.endswith("s2"))
    assert [(s.name, len(s.points)) for s in stopped.series] == [("loss", 1), ("valid", 1)]
    assert set(stopped.one_offs) == {"tokenizer", "d", "layers"}

    write_report(batch)
    report = json.loads((batch / "report.json").read_text())
    kinds = {(c["run_id"], s["name"]): s["curve"] for c in report["curves"] for s in c["series"]}
    assert kinds["tiny-lm__baseline__s2", "loss"] is True
    assert kinds["other__baseline__s3", "d"] is False
    assert (batch / "curves-tiny-lm.png").is_file()
    assert not (batch / "curves-other.png").exists()
    md = (batch / "report.md").read_text()
    assert "curves-other.png" not in md
    assert "| other__baseline__s3 | layers | job:job-1 | 2 | 1 |" in md
