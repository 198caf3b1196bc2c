"""`mlra report` gains the runs' training curves (issue 31): a PNG a task laying its runs
over each other, each series in report.json whole and in report.md a line."""

from __future__ import annotations

import json
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog
from mlra.batch.report import write_report
from mlra.batch.report_curves import png_name
from tests.batch.metrics_runs import metrics_run


def _batch(tmp_path: Path) -> Path:
    batch = tmp_path / "b"
    metrics_run(batch / "runs", "answer__m1__s1", model="m1", seed=1)
    metrics_run(batch / "runs", "answer__m2__s1", model="m2", seed=1, losses=(3.0, 2.0, 0.1))
    metrics_run(batch / "runs", "other__m1__s1", task="other/x", model="m1")
    (batch / "batch.json").write_text("{}", encoding="utf-8")
    return batch


def test_the_report_holds_each_runs_curves_and_a_png_a_task(tmp_path: Path) -> None:
    batch = _batch(tmp_path)
    write_report(batch)
    report = json.loads((batch / "report.json").read_text())
    curves = {c["run_id"]: c for c in report["curves"]}
    assert set(curves) == {"answer__m1__s1", "answer__m2__s1", "other__m1__s1"}
    series = {s["name"]: s for s in curves["answer__m2__s1"]["series"]}
    assert set(series) == {"loss", "acc"}
    assert series["loss"]["source"] == "job:j1"
    assert series["loss"]["points"] == [[100, 10.0, 3.0], [200, 20.0, 2.0], [300, 30.0, 0.1]]
    assert series["loss"]["thinned"] == 3
    assert series["acc"]["points"][0][0] is None  # no step: over the run clock

    assert (batch / "curves-answer.png").stat().st_size > 5000
    assert (batch / png_name("other/x")).name == "curves-other_x.png"
    assert (batch / "curves-other_x.png").is_file()
    md = (batch / "report.md").read_text()
    assert "## Training curves" in md and "![curves: answer](curves-answer.png)" in md
    assert "| answer__m2__s1 | loss | job:j1 | 3 | 3 → 0.1 | 0.1 | 3 | 3 |" in md


def test_a_report_without_curves_reads_as_before(tmp_path: Path) -> None:
    run = tmp_path / "b" / "runs" / "plain"
    metrics_run(tmp_path / "b" / "runs", "plain")
    # The same run with its metrics events dropped: nothing of curves appears.
    lines = (run / EVENTS_FILE).read_text().splitlines()
    (run / EVENTS_FILE).unlink()
    log = EventLog(run / EVENTS_FILE)
    for line in lines:
        event = ev.parse_event(line)
        if not isinstance(event, ev.Metrics):
            event.seq = 0
            log.append(event)
    log.close()
    write_report(tmp_path / "b", plots=False)
    assert json.loads((tmp_path / "b" / "report.json").read_text())["curves"] == []
    assert "Training curves" not in (tmp_path / "b" / "report.md").read_text()


def test_two_jobs_printing_loss_are_two_series(tmp_path: Path) -> None:
    from mlra.batch.curves import run_series

    def point(v: float, step: int) -> ev.MetricPoint:
        return ev.MetricPoint(name="loss", value=v, step=step, wall=float(step))

    events: list[ev.Event] = [
        ev.Metrics(source="job:j1", job="j1", points=[point(2.0, 1), point(1.0, 2)]),
        ev.Metrics(source="job:j2", job="j2", points=[point(5.0, 1)]),
        ev.Metrics(source="job:j1", job="j1", points=[point(0.5, 3)]),
    ]
    series = {s.name: [p.value for p in s.points] for s in run_series(events)}
    assert series == {"j1/loss": [2.0, 1.0, 0.5], "j2/loss": [5.0]}
