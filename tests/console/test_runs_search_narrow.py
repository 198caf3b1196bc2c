"""`mlra runs` of a folder holding a search, at 160 columns: the search's cell (some 60 to
90 characters of counts) cost the table its search column and every column after it in
priority. On a terminal too narrow for it, the cell says how many attempts were tried and
which was graded, with its validation; a wide terminal and a pipe keep the whole words."""

from __future__ import annotations

from pathlib import Path

from mlra.agent.agents.run import agent_for
from mlra.console.text.run_rows import search_cell, short_search_cell
from mlra.tasks.spec import load_task
from tests.agent.test_search import _variant_task, greedy_search
from tests.console.test_runs_by_priority import _on_a_terminal


async def test_at_160_columns_a_search_keeps_its_column_in_a_short_form(
    tmp_path: Path, answer_task: Path
) -> None:
    controller = greedy_search(load_task(_variant_task(answer_task, tmp_path)), tmp_path, 3)
    await controller.run(agent_for)
    runs = tmp_path / "runs"

    screen = _on_a_terminal(["runs", "--runs-dir", str(runs)], 160)
    header, row, *legend = screen.splitlines()
    names = header.split()
    kept = ["id", "task", "model", "status", "reason", "score", "normalized", "best", "val."]
    assert names[: len(kept)] == kept and {"search", "success"} <= set(names), screen
    assert all(len(line) <= 160 for line in screen.splitlines()), screen
    assert row.startswith(controller.run_dir.name) and "3 tried, sub a3 0.5 " in row, screen
    said = " ".join(" ".join(legend).split())
    assert "search: attempts tried, the graded attempt and its validation score" in said
    assert "search" not in said.split("left out at 160 columns:")[-1], screen

    wide = _on_a_terminal(["runs", "--runs-dir", str(runs)], 400)
    assert "3 tried (3 validated), best a3 0.5, sub a3, gap +0.5" in wide, wide
    assert "left out" not in wide


def test_the_short_cell_names_the_graded_attempt_and_a_better_one() -> None:
    summary = {"tried": 4, "validated": 3, "buggy": 1, "best": "a3", "best_validation": 0.8}
    submitted = summary | {"submitted": "a2", "submitted_validation": 0.75}
    assert short_search_cell(submitted) == "4 tried, sub a2 0.75, best a3 0.8"
    best = summary | {"submitted": "a3", "submitted_validation": 0.8}
    assert short_search_cell(best, graded_best=True) == "4 tried, graded best a3 0.8"
    assert (
        short_search_cell(summary | {"running": 1}, ended=False)
        == "4 tried, 1 running, best a3 0.8"
    )
    assert short_search_cell(summary) == "4 tried, best a3 0.8, none submitted"
    none = {"tried": 2, "validated": 0, "buggy": 2}
    assert short_search_cell(none) == "2 tried, none validated"
    assert search_cell(none) == "2 tried (2 buggy), none validated, none submitted"
