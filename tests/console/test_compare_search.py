"""`mlra compare` of a search draws the curves of the attempt it submitted: the search's
own log holds no training points (its attempts trained, each in its own folder), so
its curves panel said "no curves recorded" while comparing `attempts/a1` with
`attempts/a2` drew them. The attempt's curves are read as the shared page reads them
(batch/curves.py `attempt_metrics`), labelled `<run> (a2)` and said so. Real run
folders, written by the real event log; the real screen."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog
from mlra.batch.compare.overlay import overlay
from mlra.batch.compare.runs import load_all
from mlra.console.screens.compare_screen import CompareApp
from tests.batch.compare_runs import compared_run
from tests.batch.share_corpus import search_started
from tests.batch.test_share_search_curves import _attempt
from tests.console.test_attach import pilot_wait

A2_STARTED_T = 300.0


def _search(runs: Path, by: Literal["agent", "deadline"] = "agent") -> Path:
    """A search whose a2 (started 300 s into the search) was submitted (`by` the agent),
    or graded at the deadline (`by` the deadline)."""
    run = runs / "search"
    log = EventLog(run / EVENTS_FILE)
    log.append(search_started("search"))
    for attempt, t in (("a1", 1.0), ("a2", A2_STARTED_T)):
        started = ev.AttemptStarted(attempt=attempt, operator="draft", folder=f"attempts/{attempt}")
        started.t = t
        log.append(started)
    frozen = "attempts/a2/validations/1/artifact/answer.txt"
    log.append(ev.Submission(path="answer.txt", by=by, frozen=frozen, attempt="a2"))
    log.append(ev.RunFinished(status="finished", reason="submitted"))
    log.close()
    _attempt(run, "a1", 0.0)
    _attempt(run, "a2", 0.3)
    return run


async def test_compare_of_a_search_draws_its_submitted_attempts_curves(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    search = _search(runs)
    plain = compared_run(runs, "plain", task="tiny-lm", losses=(5.5, 5.0, 4.8))
    compared = load_all([search, plain])
    app = CompareApp(compared)
    async with app.run_test(size=(140, 50)) as pilot:

        def shown_text(*texts: str) -> bool:
            shot = app.export_screenshot().replace("&#160;", " ")
            return all(t in shot for t in texts)

        await pilot_wait(pilot, "the legend names a2", lambda: shown_text("search (a2)"))
        await pilot.press("c")
        await pilot_wait(
            pilot,
            "the search's curves, said to be a2's",
            lambda: shown_text("curves of A: its submitted attempt a2", "loss"),
        )
        assert not shown_text("no curves recorded")
    assert compared[0].label == "search (a2)"
    shown = overlay(compared, "time")
    lines = shown.lines["loss"]
    assert [line.run for line in lines] == [0, 1]  # the search's line, then the run's
    # a2's loss (5.6, 4.6, 3.6), on the search's clock: a2 began 300 s in
    assert [round(y, 6) for y in lines[0].y] == [5.6, 4.6, 3.6]
    assert lines[0].x == [A2_STARTED_T + 2.0, A2_STARTED_T + 3.0, A2_STARTED_T + 4.0]


def test_a_search_graded_at_its_deadline_draws_the_graded_attempts(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    compared = load_all([_search(runs, by="deadline"), compared_run(runs, "plain", task="tiny-lm")])
    assert [line.run for line in overlay(compared, "time").lines["loss"]] == [0, 1]
    assert (compared[0].curves_of, compared[0].curves_why) == ("a2", "graded")
