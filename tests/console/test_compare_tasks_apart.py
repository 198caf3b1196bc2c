"""`mlra compare`'s curves of runs of two tasks: each task's loss and score in panels of
their own, named after the task, as the matrix stars each task's best apart, and each
task's best validation so far apart too. One panel of each kind laid a language model's
loss of 5 over a classifier's 0.2, which drew as a flat line at the bottom, and one
classifier's accuracy and another task's loss in one 'best validation so far'."""

from __future__ import annotations

from pathlib import Path

from mlra.batch.compare.runs import load_all
from mlra.console.screens.compare_screen import CompareApp
from tests.batch.compare_runs import compared_run
from tests.console.test_attach import pilot_wait


async def test_the_curves_view_draws_each_tasks_panels_apart(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    dirs = [
        compared_run(runs, "cls", task="classify", losses=(0.5, 0.3, 0.2)),
        compared_run(
            runs, "lm", task="lm", losses=(5.2, 4.6, 4.4), accs=(0.6, 0.7),
            validations=(4.8, 4.5), higher_is_better=False,
        ),
    ]  # fmt: skip
    app = CompareApp(load_all(dirs))
    async with app.run_test(size=(120, 60)) as pilot:
        await pilot.press("c")

        def shown(*titles: str) -> bool:
            shot = app.export_screenshot().replace("&#160;", " ")
            return all(t in shot for t in titles)

        await pilot_wait(
            pilot,
            "each task's loss and acc panels",
            lambda: shown("loss · classify", "acc · classify", "loss · lm", "acc · lm"),
        )
        await pilot.press("b")
        await pilot_wait(
            pilot,
            "each task's best validation apart",
            lambda: shown("best accuracy so far · classify", "best accuracy so far · lm"),
        )
