"""`mlra compare`'s screen at 80x24 and 160x48, from recorded runs (every figure on
screen fixed): the matrix with the best starred and the settings that differ, the
overlaid curves, the best validation so far, and a diff of the submitted files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlra.batch.compare.runs import load_all
from mlra.console.screens.compare_screen import CompareApp
from tests.batch.compare_runs import compared_run


def _app(tmp_path: Path, n: int = 3) -> CompareApp:
    runs = tmp_path / "runs"
    specs = [
        dict(model="gpt-x", score=0.62, losses=(2.4, 1.6, 1.1, 0.8), accs=(0.3, 0.5, 0.62)),
        dict(
            model="claude-y",
            score=0.81,
            losses=(2.2, 1.2, 0.7, 0.4),
            accs=(0.4, 0.7, 0.81),
            validations=(0.5, 0.78, 0.7),
            config={"temperature": 0.7},
            answer="43\n",
        ),
        dict(
            model="gpt-x",
            score=0.55,
            losses=(2.6, 2.0, 1.5, 1.3),
            accs=(0.2, 0.4, 0.55),
            config={"seed": 2},
            validations=(0.2, 0.35, 0.4),
            tokens=48_000,
            cost=0.37,
        ),
    ]
    dirs = [
        compared_run(runs, f"20261129-0900{i:02d}-answer-{i:04x}", **spec)
        for i, spec in enumerate(specs[:n])
    ]
    return CompareApp(load_all(dirs))


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_matrix(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    assert snap_compare(_app(tmp_path), terminal_size=size)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_curves(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    assert snap_compare(_app(tmp_path), terminal_size=size, press=["x", "c"])


def test_best_validation_so_far(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(_app(tmp_path), terminal_size=(80, 24), press=["b"])


def test_submitted_files_diff(snap_compare: Any, tmp_path: Path) -> None:
    async def diff(pilot: Any) -> None:
        await pilot.press("d")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    assert snap_compare(_app(tmp_path, 2), terminal_size=(80, 24), run_before=diff)
