"""A search's attempt its time ended ("out of time", not "buggy") is counted and shown
wherever a search's attempts are: a row of the experiments table (the Experiments pane,
the supervisor's table, result.json's `experiments`), its own count in result.json's
`attempts`, and in what reads result.json (`mlra runs`, batch reports, `mlra compare`).
Run folders are written by hand, as a run writes them (tests/console/test_search_reports.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.text import Text

from mlra.agent.record.eventlog import EVENTS_FILE, read_events
from mlra.agent.record.run_result import RunResult
from mlra.agent.record.state import fold
from mlra.batch.compare import matrix
from mlra.batch.compare.runs import load_all
from mlra.batch.report import write_report
from mlra.console.apps.app import MlraApp
from mlra.console.panes.experiments import ExperimentsPane
from tests.console.test_search_reports import THREE, Try, listing, search_run

OUT_OF_TIME = "its time limit was reached before a validation scored it"
FOUR = [
    *THREE,
    Try("a4", "out of time", parent="a2", operator="improve", why=OUT_OF_TIME, summary="x2"),
]
"""A draft, its improvement (the best), a buggy attempt, and one its time ended."""


def test_the_attempts_counts_add_up_with_one_out_of_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """result.json counted an attempt out of time nowhere: "4 tried, 2 validated, 1 buggy"
    left one unaccounted for. It has its own count, and `mlra runs` names it."""
    runs = tmp_path / "runs"
    run_dir = search_run(runs, "r", FOUR)
    result = RunResult.model_validate_json((run_dir / "result.json").read_bytes())
    a = result.attempts
    assert a is not None
    assert (a.tried, a.validated, a.buggy, a.out_of_time) == (4, 2, 1, 1)
    _, lines = listing(runs, capsys)
    assert "4 tried (2 validated, 1 buggy, 1 out of time), best a2 0.7812, sub a2" in lines["r"]


def test_an_attempt_out_of_time_is_a_row_of_the_experiments_table(tmp_path: Path) -> None:
    """The attempt left the table (only validated and buggy attempts made rows): the
    Experiments pane and result.json counted three tries of four. Its row says it ran out
    of time, to the supervisor and in the pane (a yellow ◷, not a failure's red ×)."""
    run_dir = search_run(tmp_path / "runs", "r", FOUR)
    result = RunResult.model_validate_json((run_dir / "result.json").read_bytes())
    assert result.experiments == 4
    events = read_events(run_dir / EVENTS_FILE)
    table = fold(events).experiments
    said = table.render().splitlines()
    assert said[-1].startswith(f" #4 out of time ({OUT_OF_TIME})"), said
    assert said[-2].startswith(" #3 failed (train.py raised KeyError 'x')"), said


async def test_the_experiments_pane_marks_an_attempt_out_of_time(tmp_path: Path) -> None:
    run_dir = search_run(tmp_path / "runs", "r", FOUR)
    app = MlraApp(events=read_events(run_dir / EVENTS_FILE))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        pane = app.query_one(ExperimentsPane)
        text = pane.content
        assert pane.display and isinstance(text, Text)
        lines = str(text).splitlines()
        assert lines[0].startswith("best 0.7812 #2 · 4 tries"), lines
        assert lines[3].rstrip().endswith("×× ◷◷"), lines  # the chart's bottom row
        row = next(line for line in lines if line.startswith("#4"))
        assert "out of time" in row, lines
        assert "attempt a4: x2" in lines[lines.index(row) + 1]
        late = [s for s in text.spans if "◷" in text.plain[s.start : s.end]]
        assert late and all("yellow" in str(s.style) for s in late)


def test_batch_reports_and_compare_count_the_attempts_out_of_time(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    search_run(runs, "s1", FOUR, seed=1)
    search_run(runs, "s2", seed=2)
    write_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "| seed | attempts | best |" in md
    assert "| s1 | classify | m | 1 | 4 tried (2 validated, 1 buggy, 1 out of time) | a2 |" in md
    assert "| s2 | classify | m | 2 | 3 tried (2 validated, 1 buggy) | a2 |" in md

    m = matrix.build(load_all([runs / "s1", runs / "s2"]))
    (row,) = [r for r in m.rows if r.name.startswith("attempts")]
    assert row.cells == [
        "4 tried (2 validated, 1 buggy, 1 out of time)",
        "3 tried (2 validated, 1 buggy)",
    ]
