"""`mlra share` of a search draws what the console's Curves view showed: each attempt's
loss and validation curves, by attempt (the newcomer's page of a search had one dot,
"best minimal_pair_accuracy so far (1 points)", on an axis from 0.28 to 1.28, and no
attempt's curve). Real run folders, written by the real event log; the real CLI."""

from __future__ import annotations

import re
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog
from mlra.batch.curves import axis_range
from mlra.console.cli.cli import main
from tests.batch.share_corpus import search_started


def _attempt(run: Path, attempt: str, drop: float) -> None:
    log = EventLog(run / "attempts" / attempt / EVENTS_FILE)
    log.append(search_started(f"search-{attempt}"))
    # An older run's log holds `d` as a series (read from `model: d=128`): no curve.
    points = [ev.MetricPoint(name="d", value=128.0, step=None, wall=1.0)]
    for i, step in enumerate((100, 200, 300)):
        points.append(ev.MetricPoint(name="loss", value=5.9 - i - drop, step=step, wall=2.0 + i))
        points.append(ev.MetricPoint(name="valid", value=5.8 - i - drop, step=step, wall=2.0 + i))
    log.append(ev.Metrics(source="job:job-1", kind="log", job="job-1", points=points))
    log.append(ev.RunFinished(status="finished", reason="submitted"))
    log.close()


def _search(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "search"
    log = EventLog(run / EVENTS_FILE)
    log.append(search_started("search"))
    for attempt in ("a1", "a2"):
        log.append(
            ev.AttemptStarted(attempt=attempt, operator="draft", folder=f"attempts/{attempt}")
        )
    log.append(
        ev.AttemptFinished(attempt="a1", status="validated", score=0.78, metric="accuracy", t=450)
    )
    log.append(ev.RunFinished(status="finished", reason="submitted"))
    log.close()
    _attempt(run, "a1", 0.0)
    _attempt(run, "a2", 0.3)
    return run


def _figures(page: str) -> dict[str, str]:
    """Each curve figure's caption (its title) to its SVG."""
    out: dict[str, str] = {}
    for svg, caption in re.findall(r"<svg(.*?)</svg><figcaption>(.*?)</figcaption>", page):
        out[re.sub(r"<[^>]+>", "", caption).split(" (")[0]] = svg
    return out


def test_a_searchs_page_draws_each_attempts_loss_and_valid(tmp_path: Path) -> None:
    run = _search(tmp_path)
    out = tmp_path / "page.html"
    assert main(["share", str(run), "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    figures = _figures(page)
    assert set(figures) == {
        "best accuracy so far",
        "loss, by attempt",
        "valid, by attempt",
    }, figures.keys()
    loss = figures["loss, by attempt"]
    assert loss.count("<polyline") == 2  # a line an attempt, each its own colour
    assert 'class="line c0"' in loss and 'class="line c1"' in loss
    caption = page[page.index("loss, by attempt") :].split("</figcaption>")[0]
    assert "a1" in caption and "a2" in caption  # the legend names the attempts
    assert "step</text>" in loss  # over steps, as the console draws them


def test_one_reading_is_a_dot_on_an_axis_within_0_and_1(tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    assert main(["share", str(_search(tmp_path)), "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    best = _figures(page)["best accuracy so far"]
    assert "<circle" in best and "<polyline" not in best
    ticks = [float(t) for t in re.findall(r'class="tick"[^>]*>([-\d.e]+)', best)]
    y_top, y_bottom = ticks[0], ticks[1]
    assert 0.0 <= y_bottom < 0.78 < y_top <= 1.0, ticks
    assert "(1 point)" in page


def test_an_axis_for_a_fraction_stays_within_0_and_1() -> None:
    lo, hi = axis_range([0.7, 0.91, 1.0])
    assert lo >= 0.65 and hi == 1.0
    assert axis_range([0.5]) == (0.4, 0.6)
    lo, hi = axis_range([4.0, 2.0])  # a loss: padded, not clamped
    assert lo < 2.0 and hi > 4.0
