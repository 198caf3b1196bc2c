"""`mlra runs` on a narrow terminal keeps what a researcher looks for first (the run,
its task, its status, its score and verdict) and drops the rest in order; `--sort`,
`--task`, `--status` and `--json` choose and order the rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlra.console.cli.cli import main
from mlra.console.text.run_columns import fit_columns
from tests.batch.compare_runs import compared_run
from tests.batch.test_experiments_report import experiment_run


def _runs(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    experiment_run(runs, "r1-middling", [0.4], model="anthropic/claude-sonnet-4-6", score=0.5)
    experiment_run(runs, "r2-best", [0.7, 0.9], model="openai/gpt-5.1-codex-mini", score=0.875)
    experiment_run(runs, "r3-worst", [], score=0.125)
    return runs


def _on_a_terminal(args: list[str], columns: int) -> str:
    """`mlra ...` with a terminal of `columns` as its stdout (a pty), as a person runs
    it: its screen, escape sequences and carriage returns taken out."""
    import os
    import pty
    import re
    import subprocess
    import sys

    main_fd, child_fd = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "24", "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlra", *args], stdout=child_fd, stderr=child_fd, env=env
    )
    os.close(child_fd)
    chunks = []
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main_fd)
    assert proc.wait(timeout=60) == 0
    text = b"".join(chunks).decode()
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "")


def test_at_80_columns_the_score_and_verdict_stay(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    screen = _on_a_terminal(["runs", "--runs-dir", str(runs)], 80)
    header, *lines = screen.splitlines()
    names = header.split()
    assert names[:4] == ["id", "task", "model", "status"] and {"score", "success"} <= set(names)
    assert all(len(line) <= 80 for line in screen.splitlines()), screen
    cells = {line.split()[0]: line.split() for line in lines if line.startswith("r")}
    assert cells["r2-best"][:4] == ["r2-best", "answer", "openai/gpt-5.1-codex-mini", "finished"]
    assert cells["r2-best"][names.index("score")] == "0.875"
    assert "left out at 80 columns: " in screen and "forked" in screen


def test_the_model_gives_way_after_the_verdict_not_before_reason_and_search(
    tmp_path: Path,
) -> None:
    """Comparing agents, the model is what tells two rows apart: at 80 columns it stays
    and reason and normalized go (it went first of them, even at 160 columns)."""
    runs = _runs(tmp_path)
    screen = _on_a_terminal(["runs", "--runs-dir", str(runs)], 80)
    header, *lines = screen.splitlines()
    assert header.split() == ["id", "task", "model", "status", "score", "success"], screen
    assert any("openai/gpt-5.1-codex-mini" in line for line in lines), screen
    left_out = " ".join(screen.split("left out at 80 columns: ")[1].split())
    assert left_out.startswith("reason, normalized, best val.,"), screen
    assert "model" not in left_out


def test_the_docs_give_the_order_columns_give_way_in() -> None:
    """docs/resume-fork-replay.md names the columns in the order they are kept."""
    from mlra.console.text.run_columns import KEPT, PRIORITY

    doc = " ".join((Path(__file__).parents[2] / "docs/resume-fork-replay.md").read_text().split())
    kept = ", ".join(PRIORITY[: KEPT - 1]) + f" and {PRIORITY[KEPT - 1]} whatever the width"
    rest = ", ".join(PRIORITY[KEPT + 1 : -1]) + f" and {PRIORITY[-1]}:"
    assert f"keeps the {kept}, then the {PRIORITY[KEPT]}, then {rest}" in doc


def test_at_80_columns_a_long_run_id_is_cut_not_the_status_and_score(tmp_path: Path) -> None:
    """An MLAgentBench task's run id is some 60 characters: with the task beside it, the
    five columns kept were wider than 80, and the terminal cut off status, score and
    success, leaving the id and the task alone."""
    runs = tmp_path / "runs"
    long_id = "20261130-064122-mlagentbench-amp-parkinsons-disease-progression-0b495687ad00c9bc"
    experiment_run(runs, long_id, [0.4], score=0.875)
    screen = _on_a_terminal(["runs", "--runs-dir", str(runs)], 80)
    lines = screen.splitlines()
    assert lines[0].split()[:5] == ["id", "task", "status", "score", "success"], screen
    (row,) = [line for line in lines if line.startswith("20261130-")]
    assert len(row) <= 80 and "finished" in row and "0.875" in row, screen
    cut = row.split()[0]
    assert cut.startswith("20261130-064122") and cut.endswith("ad00c9bc") and "…" in cut


def test_a_wide_terminal_or_a_pipe_gets_every_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = _runs(tmp_path)
    wide = _on_a_terminal(["runs", "--runs-dir", str(runs)], 400)
    assert "forked from" in wide and "left out" not in wide
    assert main(["runs", "--runs-dir", str(runs)]) == 0  # a pipe: every column
    assert "forked from" in capsys.readouterr().out


def test_columns_give_way_in_order_of_priority() -> None:
    headers = ["id", "task", "model", "status", "reason", "score", "success", "forked from"]
    row = ["r1", "answer", "openai/gpt-5.1", "finished", "submitted", "0.875", "yes", "-"]
    kept, _ = fit_columns(headers, [row], 70)
    assert kept == ["id", "task", "model", "status", "reason", "score", "success"]
    kept, (cells,) = fit_columns(headers, [row], 60)
    assert kept == ["id", "task", "model", "status", "score", "success"]
    assert cells == ["r1", "answer", "openai/gpt-5.1", "finished", "0.875", "yes"]
    kept, _ = fit_columns(headers, [row], 50)
    assert kept == ["id", "task", "status", "score", "success"]
    kept, _ = fit_columns(headers, [row], 10)  # never fewer than the five
    assert kept == ["id", "task", "status", "score", "success"]


def test_sort_filter_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = _runs(tmp_path)

    def ids(*args: str) -> list[str]:
        assert main(["runs", "--runs-dir", str(runs), "--json", *args]) == 0
        return [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()]

    assert ids("--sort", "score") == ["r2-best", "r1-middling", "r3-worst"]
    assert ids("--sort", "score", "--reverse") == ["r3-worst", "r1-middling", "r2-best"]
    assert ids("--sort", "model")[0] == "r1-middling"  # anthropic/... first
    assert ids("--task", "answ", "--status", "finished", "--sort", "id") == [
        "r1-middling",
        "r2-best",
        "r3-worst",
    ]
    assert ids("--status", "running") == []
    with pytest.raises(SystemExit) as exit_:
        main(["runs", "--runs-dir", str(runs), "--sort", "colour"])
    assert exit_.value.code == 2


def test_sort_by_score_keeps_each_task_apart_best_first_by_its_direction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two tasks' scores are no one scale: a two-label accuracy of 0.81 ranked above an
    eight-label one of 0.7, and a perplexity of 30 (the worse) first of all, so
    `--sort score --compare 3` compared the "three best" of three tasks. Each task's runs
    now stand together, the best first by its own direction."""
    runs = tmp_path / "runs"
    compared_run(runs, "two-labels", task="sentiment", score=0.81)
    compared_run(runs, "eight-worse", task="topics", score=0.59)
    compared_run(runs, "eight-better", task="topics", score=0.7)
    compared_run(runs, "ppl-30", task="lm", score=30.0, higher_is_better=False)
    compared_run(runs, "ppl-12", task="lm", score=12.0, higher_is_better=False)
    compared_run(runs, "killed", task="lm", finished=False)
    assert main(["runs", "--runs-dir", str(runs), "--json", "--sort", "score"]) == 0
    ids = [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()]
    assert ids == ["ppl-12", "ppl-30", "killed", "two-labels", "eight-better", "eight-worse"]
