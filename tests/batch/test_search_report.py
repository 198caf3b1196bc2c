"""Batch reports give a search's honest numbers (issue 27): per run, attempts tried, the
best validation, the attempt graded on the test split, its test score and the
validation-to-test gap; per group, their means. A report of runs that did not search
reads as it always has."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from mlra.batch.report import write_report
from mlra.batch.report_tables import CSV_FIELDS, group_line
from tests.console.test_search_reports import Try, plain_run, search_run


def test_the_report_gives_each_search_and_the_mean_gap(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    search_run(runs, "s1", seed=1, test_score=0.769)  # a2 validated 0.7812: gap -0.0122
    search_run(
        runs,
        "s2",
        [Try("a1", "validated", 0.8), Try("a2", "buggy", parent="a1", why="nan loss")],
        submitted="a1",
        by="deadline",
        reason="deadline",
        seed=2,
        test_score=0.79,  # gap -0.01
    )
    plain_run(runs, "p1")
    groups = write_report(tmp_path)

    md = (tmp_path / "report.md").read_text()
    table = md.split("Search over attempts")[1].splitlines()
    group = next(line for line in table if line.startswith("| classify | m |"))
    # 2 searched, 2.5 attempts a run, best validation mean, test mean, gap mean ± SE, 1 unsubmitted
    assert (
        group
        == "| classify | m | 2 | 2.5 | 0.7906 ± 0.0094 | 0.7795 ± 0.0105 | -0.0111 ± 0.0011 | 1 |"
    )
    per_run = {line.split(" | ")[0]: line for line in table if line.startswith("| s")}
    assert per_run["| s1"] == (
        "| s1 | classify | m | 1 | 3 tried (2 validated, 1 buggy) | a2 | 0.7812 | a2 | 0.7812 | "
        "0.7690 | -0.0122 |"
    )
    assert per_run["| s2"] == (
        "| s2 | classify | m | 2 | 2 tried (1 validated, 1 buggy) | a1 | 0.8000 | "
        "a1 (best, unsubmitted) | 0.8000 | "
        "0.7900 | -0.0100 |"
    )
    assert "| p1 |" not in md  # the run that did not search is in the main table only
    assert "| answer | m | 1 | 1 |" in md

    with open(tmp_path / "report.csv", encoding="utf-8") as f:
        by_task = {g["task"]: g for g in csv.DictReader(f)}
    searched = by_task["classify"]
    assert searched["searched"] == "2" and float(searched["search_tried_mean"]) == 2.5
    assert float(searched["search_gap_mean"]) == pytest.approx(-0.0111)
    assert searched["search_graded_unsubmitted"] == "1"
    assert by_task["answer"]["searched"] == "0" and by_task["answer"]["search_gap_mean"] == ""
    # Existing columns first and unchanged; the search's after them (then judged_runs).
    assert CSV_FIELDS[:3] == ["task", "model", "runs"] and CSV_FIELDS[-10] == "searched"

    report = json.loads((tmp_path / "report.json").read_text())
    rows = {r["run_id"]: r for r in report["runs"]}
    assert rows["s1"]["searched"] and rows["s1"]["search_tried"] == 3
    assert (rows["s1"]["search_submitted"], rows["s1"]["search_test_score"]) == ("a2", 0.769)
    assert rows["s1"]["search_gap"] == pytest.approx(-0.0122)
    assert rows["s2"]["search_graded_unsubmitted"] is True
    assert not rows["p1"]["searched"] and rows["p1"]["search_tried"] is None

    line = group_line(next(g for g in groups if g.task == "classify"))
    assert line.endswith(
        "search: 2.5 attempts a run, best validation 0.7906 ± 0.0094, validation-to-test gap "
        "-0.0111 ± 0.0011, 1 graded their best (nothing submitted)"
    )
    assert "search" not in group_line(next(g for g in groups if g.task == "answer"))


def test_a_report_without_a_search_has_no_search_table(tmp_path: Path) -> None:
    plain_run(tmp_path / "runs", "p1")
    write_report(tmp_path, plots=False)
    assert "Search over attempts" not in (tmp_path / "report.md").read_text()
