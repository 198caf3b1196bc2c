"""`mlra share` of a search reads each attempt's log only inside the run's folder: a
run's log that names an attempt folder elsewhere (`../elsewhere`, an absolute path, or
a link under `attempts/` that leads out) gives a page with nothing from that folder.
The log is the agent's record, and what it names is data, never authority: a page
drawn from any folder it named could carry another run's, or any file's, numbers into
what a person shares (AttemptNode.folder_in is the rule). Real run folders, written by
the real event log; the real CLI."""

from __future__ import annotations

from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog
from mlra.console.cli.cli import main
from tests.batch.share_corpus import search_started


def _attempt_log(folder: Path, series: str) -> None:
    """An attempt's own log whose training curve is named `series`."""
    log = EventLog(folder / EVENTS_FILE)
    log.append(search_started(f"search-{folder.name}"))
    points = [
        ev.MetricPoint(name=series, value=5.9 - i, step=step, wall=2.0 + i)
        for i, step in enumerate((100, 200, 300))
    ]
    log.append(ev.Metrics(source="job:job-1", kind="log", job="job-1", points=points))
    log.append(ev.RunFinished(status="finished", reason="submitted"))
    log.close()


def test_a_search_page_reads_no_attempt_folder_outside_the_run(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "search"
    elsewhere = tmp_path / "runs" / "elsewhere"  # another run's folder, beside this one
    _attempt_log(elsewhere, "sibling_loss")
    absolute = tmp_path / "outside"
    _attempt_log(absolute, "absolute_loss")
    linked = tmp_path / "linked"
    _attempt_log(linked, "linked_loss")
    _attempt_log(run / "attempts" / "a1", "own_loss")
    (run / "attempts" / "a4").symlink_to(linked, target_is_directory=True)

    log = EventLog(run / EVENTS_FILE)
    log.append(search_started("search"))
    named = {"a1": "attempts/a1", "a2": "../elsewhere", "a3": str(absolute), "a4": "attempts/a4"}
    named["a5"] = "."  # the run's own folder is no attempt's either
    for attempt, folder in named.items():
        log.append(ev.AttemptStarted(attempt=attempt, operator="draft", folder=folder))
    log.append(ev.RunFinished(status="finished", reason="submitted"))
    log.close()

    out = tmp_path / "page.html"
    assert main(["share", str(run), "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "own_loss, by attempt" in page  # the attempt inside the run is drawn
    for leaked in ("sibling_loss", "absolute_loss", "linked_loss"):
        assert leaked not in page, leaked
    figure = page[page.index("own_loss, by attempt") :].split("</figcaption>")[0]
    assert figure.count("■") == 1  # one attempt's line: a1's alone
