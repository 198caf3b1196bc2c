"""`mlra share` within its size budget: a synthetic 300 MB log (1 MB outputs, a hundred
thousand curve points) makes a page within `--max-mb`, its scores whole, and says what it
left out; a run still going (a half-written last line) and a log from an older mlra
(fields it did not write yet) are shared as they are."""

from __future__ import annotations

import json
import time
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.annotations import Annotation, append_annotation
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog, encode_event
from mlra.console.cli.cli import main
from tests.batch.metrics_runs import metrics_run
from tests.batch.test_share_page import check_page_is_ours

MB = 1024 * 1024


def _line(event: ev.Event, seq: int) -> bytes:
    event.seq, event.ts = seq, 1_700_000_000.0 + seq
    return encode_event(event)


def _synthetic_log(run_dir: Path, size: int) -> int:
    """A run's log grown to `size` bytes: steps of a model's streamed words, a command's
    output streamed and whole (1 MB), and metrics."""
    log = run_dir / EVENTS_FILE
    lines = log.read_bytes().splitlines(keepends=True)
    finished = lines.pop()  # run_finished goes last again
    seq = len(lines)
    output = ("epoch 1/1 loss=0.25 " * 52_000)[: MB - 200]
    with open(log, "wb") as f:
        f.writelines(lines)
        written, step = sum(map(len, lines)), 0
        while written < size:
            step += 1
            for event in (
                ev.StepStarted(agent="worker", step=step, turn=step, t=step),
                ev.ToolCall(call_id=f"c{step}", agent="worker", tool="bash", t=step,
                            arguments={"command": "python train.py"}),
                *(ev.TextDelta(agent="worker", turn=step, text="I will train ", t=step)
                  for _ in range(200)),
                *(ev.ToolOutput(call_id=f"c{step}", text=output[:65536], t=step)
                  for _ in range(4)),
                ev.ToolResult(call_id=f"c{step}", tool="bash", agent="worker", ok=True,
                              output=output, t=step),
                ev.Metrics(source="job:j9", job="j9", t=step, points=[
                    ev.MetricPoint(name="train_loss", value=1 / (step * 400 + k), step=step * 400 + k,
                                   wall=float(step)) for k in range(400)
                ]),
            ):  # fmt: skip
                seq += 1
                data = _line(event, seq)
                f.write(data)
                written += len(data)
        seq += 1
        record = json.loads(finished)
        record["seq"] = seq
        f.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
    return written


def test_a_300_mb_log_makes_a_page_within_its_budget(tmp_path: Path) -> None:
    run_dir = metrics_run(tmp_path / "runs", "big", score=0.875)
    size = _synthetic_log(run_dir, 300 * MB)
    assert size >= 300 * MB
    out = tmp_path / "big.html"
    began = time.monotonic()
    assert main(["share", str(run_dir), "-o", str(out), "--max-mb", "2"]) == 0
    took = time.monotonic() - began
    assert out.stat().st_size <= 2 * MB, out.stat().st_size
    page = check_page_is_ours(out.read_text(encoding="utf-8"))
    shown = "".join(page.text)
    assert "= 0.875" in shown  # the score, whole
    assert "transcript steps left out past the size budget" in shown
    assert "transcript texts cut to head and tail" in shown
    assert "curve points thinned" in shown and "train_loss" in shown
    print(f"300 MB log -> {out.stat().st_size / MB:.2f} MB page in {took:.1f} s")


def test_the_default_budget_on_a_smaller_log(tmp_path: Path) -> None:
    run_dir = metrics_run(tmp_path / "runs", "mid", score=0.5)
    _synthetic_log(run_dir, 12 * MB)
    out = tmp_path / "mid.html"
    assert main(["share", str(run_dir), "-o", str(out), "--max-mb", "0.1"]) == 0
    assert out.stat().st_size <= 0.1 * MB
    shown = "".join(check_page_is_ours(out.read_text(encoding="utf-8")).text)
    assert "transcript steps left out past the size budget" in shown and "= 0.5" in shown


def test_a_run_still_going_and_an_older_log(tmp_path: Path) -> None:
    run_dir = metrics_run(tmp_path / "runs", "going", score=0.5)
    log = run_dir / EVENTS_FILE
    lines = log.read_bytes().splitlines(keepends=True)
    first = json.loads(lines[0])
    for name in ("budget", "mlra_version", "task_dir", "context_window"):
        first.pop(name, None)  # fields an older mlra did not write
    lines[0] = json.dumps(first, separators=(",", ":")).encode() + b"\n"
    kept = [ln for ln in lines if b'"type":"run_finished"' not in ln]
    tail = b'{"v":2,"seq":%d,"ts":1.0,"t":9,"type":"worker_thought","text":"half' % (len(kept) + 1)
    log.write_bytes(b"".join(kept) + tail)
    (run_dir / "result.json").unlink(missing_ok=True)
    out = tmp_path / "going.html"
    assert main(["share", str(run_dir), "-o", str(out)]) == 0
    shown = "".join(check_page_is_ours(out.read_text(encoding="utf-8")).text)
    assert "interrupted" in shown and f"bytes of a half-written last line: {len(tail)}" in shown
    assert "an mlra that did not record its version (recorded the run)" in shown
    writer = EventLog(log, start_seq=len(kept))  # a run writing its log holds its lock
    try:
        assert main(["share", str(run_dir), "-o", str(out)]) == 0
    finally:
        writer.close()
    shown = "".join(check_page_is_ours(out.read_text(encoding="utf-8")).text)
    assert "still running (a snapshot as of now)" in shown


def test_many_curves_are_drawn_with_fewer_points_within_the_budget(tmp_path: Path) -> None:
    many = tuple(
        ev.Metrics(source=f"job:s{i}", job=f"s{i}", points=[
            ev.MetricPoint(name=f"loss{i}", value=(k * 7919 % 1000) / 7.0, step=k, wall=float(k))
            for k in range(2000)
        ])
        for i in range(60)
    )  # fmt: skip
    run_dir = metrics_run(tmp_path / "runs", "curvy", score=0.5, more=many)
    _synthetic_log(run_dir, 12 * MB)
    out = tmp_path / "curvy.html"
    assert main(["share", str(run_dir), "-o", str(out), "--max-mb", "0.35"]) == 0
    assert out.stat().st_size <= 0.35 * MB  # at 400 buckets a curve: 0.42 MB
    page = check_page_is_ours(out.read_text(encoding="utf-8"))
    assert [t for t, _ in page.tags].count("svg") == 63  # all 60, loss, acc, train_loss
    assert "curve points thinned" in "".join(page.text)  # drawn with fewer points


def test_notes_are_never_cut_the_transcript_makes_room(tmp_path: Path) -> None:
    run_dir = metrics_run(tmp_path / "runs", "noted", score=0.5)
    _synthetic_log(run_dir, 12 * MB)
    for i in range(100):
        append_annotation(run_dir, Annotation(step=1, seq=2, comment=f"note {i} " + "n" * 3000))
    out = tmp_path / "noted.html"
    assert main(["share", str(run_dir), "-o", str(out), "--max-mb", "0.4"]) == 0
    assert out.stat().st_size <= 0.4 * MB  # with every step: 0.43 MB
    shown = "".join(check_page_is_ours(out.read_text(encoding="utf-8")).text)
    assert "Notes (100)" in shown and all(f"note {i} " + "n" * 3000 in shown for i in range(100))
    assert "transcript steps left out past the size budget" in shown
