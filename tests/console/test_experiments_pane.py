"""The Experiments pane (issue 16): the validation score over time as a chart with the
best so far highlighted, and the table of experiments, in the live console and in
replay as of the event under the cursor; hidden while there is nothing to show."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from rich.text import Text

from mlra import events as ev
from mlra.agent.record.state import fold
from mlra.console.apps.app import MlraApp
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.panes.experiments import ExperimentsPane
from mlra.console.panes.files import FilesPane
from mlra.console.text.replay import ReplayModel
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from tests.console.console_fixtures import EPOCH, recorded_run, recorded_workspace


@pytest.fixture(autouse=True)
def _utc(monkeypatch: pytest.MonkeyPatch) -> Any:
    """File times are shown in local time; pin it so the snapshots match anywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def with_experiments() -> list[ev.Event]:
    """The console fixtures' running run, then three noted experiments: a baseline, a
    failed validation, and a better model (loss: lower is better), each row written after
    its validation as the controller writes it."""
    events = recorded_run("running")

    def add(t: float, event: ev.Event) -> None:
        event.seq, event.t, event.ts = len(events) + 1, t, EPOCH + t
        events.append(event)

    def validated(t: float, score: float | None, error: str | None = None) -> None:
        validation = ev.Validation(
            artifact="submission",
            ok=error is None,
            metric="val_loss",
            higher_is_better=False,
            score=score,
            error=error,
        )
        add(t, validation)
        add(t, fold(events).experiments.next_row(validation))

    add(81, ev.ExperimentNote(hypothesis="the baseline as it is", change="none"))
    validated(95, 2.79)
    add(100, ev.ExperimentNote(hypothesis="4 layers and a longer context"))
    add(101, ev.JobStarted(job="job-1", command="bash train_big.sh", log="jobs/job-1.log"))
    validated(300, None, error="submission/model.pt is missing")
    validated(620, 2.41)
    add(630, ev.ExperimentNote(hypothesis="a cosine schedule helps further", change="lr cosine"))
    return events


def pane_text(app: MlraApp) -> str:
    return str(app.query_one(ExperimentsPane).content)


async def test_the_pane_shows_the_chart_and_table_with_the_best_highlighted() -> None:
    app = MlraApp(events=with_experiments())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        pane = app.query_one(ExperimentsPane)
        assert pane.display and pane.border_title == "Experiments"
        text = pane_text(app)
        lines = text.splitlines()
        assert lines[0] == "best 2.41 #3 · 3 tries · val_loss ↓"
        # The chart: a bar per experiment, oldest left, the failed one a red cross at the
        # bottom; the lowest loss is the shortest bar, and the best so far.
        assert [line.rstrip() for line in lines[1:4]] == ["██", "██", "██ ×× ▆▆"]
        assert lines[4].startswith("#3★") and "2.41  at 10m20s  job-1" in lines[4]
        assert lines[5].strip() == "4 layers and a longer context"
        assert lines[6].startswith("#2 ") and "—  at 5m00s  job-1" in lines[6]
        assert lines[7].strip() == "4 layers and a longer context"
        assert lines[8].startswith("#1 ") and "2.79  at 1m35s" in lines[8]
        assert lines[9].strip() == "the baseline as it is"
        assert lines[10] == "next a cosine schedule helps further"
        content = app.query_one(ExperimentsPane).content
        assert isinstance(content, Text)
        best_spans = [
            content.plain[s.start : s.end] for s in content.spans if str(s.style) == "bold green"
        ]
        assert "2.41" in best_spans and any("#3★" in s for s in best_spans)


async def test_the_pane_stays_hidden_without_experiments() -> None:
    app = MlraApp(events=recorded_run("running"))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert not app.query_one(ExperimentsPane).display


async def test_replay_shows_the_experiments_as_of_the_cursor() -> None:
    events = with_experiments()
    model = ReplayModel(events)
    app = ReplayApp(model)
    rows = [i for i, e in enumerate(events) if isinstance(e, ev.Experiment)]
    first_note = next(i for i, e in enumerate(events) if isinstance(e, ev.ExperimentNote))
    async with app.run_test(size=(160, 48)) as pilot:

        async def at(index: int) -> None:
            model.go(index)
            app.show_cursor()
            await pilot.pause()

        await at(first_note - 1)
        assert not app.query_one(ExperimentsPane).display
        await at(first_note)
        assert app.query_one(ExperimentsPane).display
        assert "no score yet · 0 tries" in pane_text(app)
        await at(rows[0])
        assert pane_text(app).startswith("best 2.79 #1 · 1 try ")
        await at(rows[1])
        assert "best 2.79 #1 · 2 tries" in pane_text(app) and "#3" not in pane_text(app)
        await at(len(events) - 1)
        assert pane_text(app).startswith("best 2.41 #3 · 3 tries")
        await at(rows[0])  # and back
        assert pane_text(app).startswith("best 2.79 #1 · 1 try ")


def _app(tmp_path: Path) -> MlraApp:
    workspace = recorded_workspace(tmp_path / "workspace")
    files = LocalSandbox(workspace, SandboxSpec(), isolation_mode="none")
    return MlraApp(events=with_experiments(), files=files)


async def _settle(pilot: Any) -> None:
    await pilot.app.query_one(FilesPane).refresh_tree()
    await pilot.pause()


def test_snapshot_with_experiments(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(_app(tmp_path), terminal_size=(160, 48), run_before=_settle)


def test_snapshot_with_experiments_80x24(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(_app(tmp_path), terminal_size=(80, 24), run_before=_settle)
