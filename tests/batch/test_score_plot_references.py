"""score.png draws each task's baseline and top across its bars, from what the runs'
gradings recorded: bars alone hid where 0.7674 stands between 0.7593 and 0.8872."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlra.batch.report import write_report
from mlra.batch.report_plots import references
from mlra.batch.report_rows import collect
from tests.batch.test_experiments_report import experiment_run


def test_score_png_has_the_baseline_and_top_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    runs = tmp_path / "runs"
    for name, model in (("r1", "baseline"), ("r2", "other")):
        experiment_run(runs, name, [], model=model, score=0.7674, baseline=0.7593, top=0.8872)
    assert references(collect(tmp_path)) == {"answer": (0.7593, 0.8872)}

    drawn: list[float] = []
    real = Axes.axhline

    def seen(self: Axes, y: float = 0, *args: Any, **kwargs: Any) -> Any:
        drawn.append(y)  # what is drawn, then drawn for real
        return real(self, y, *args, **kwargs)

    monkeypatch.setattr(Axes, "axhline", seen)
    write_report(tmp_path)
    assert (tmp_path / "score.png").read_bytes()[:4] == b"\x89PNG"
    assert 0.7593 in drawn and 0.8872 in drawn


def test_no_reference_lines_where_no_grading_recorded_them(tmp_path: Path) -> None:
    experiment_run(tmp_path / "runs", "r1", [])
    assert references(collect(tmp_path)) == {}
