"""The status line keeps the run's name (its task): what it is doing and the score's
reasons give way first, so a person with several consoles open can tell which run
this one is, at 80 columns too."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text

from mlra import events as ev
from mlra.agent.record.snapshots import SnapshotStore
from mlra.console.apps.app import MlraApp
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.panes.status import StatusBar
from mlra.console.screens.replay_panes import ReplayStatusBar
from mlra.console.text.replay import ReplayModel
from tests.console.console_fixtures import Stage, recorded_run

NAME = "edge-llm-compression"  # a built-in task's name, 20 characters


def _named(stage: Stage) -> list[ev.Event]:
    events = recorded_run(stage)
    started = events[0]
    assert isinstance(started, ev.RunStarted)
    events[0] = started.model_copy(update={"task": NAME})
    return events


async def _line(app: MlraApp, width: int, bar: type[StatusBar] = StatusBar) -> str:
    async with app.run_test(size=(width, 30)) as pilot:
        await pilot.pause()
        content = app.query_one(bar).content
        return content.plain if isinstance(content, Text) else str(content)


async def test_a_long_command_running_at_80_columns_leaves_the_name() -> None:
    line = await _line(MlraApp(events=_named("running")), 80)
    assert NAME in line, line
    assert "RUNNING" in line and "bash" in line, line  # what it does, shortened
    assert len(line) <= 80


async def test_a_score_with_all_its_reasons_gives_them_up_before_the_name() -> None:
    """The finished run's score line (top, normalized, the success rule) is long: at
    120 columns the reasons go and the name stays whole beside the score."""
    line = await _line(MlraApp(events=_named("finished")), 120)
    assert NAME in line, line
    assert "minimal_pair_accuracy = 0.812 (baseline 0.767) success" in line, line
    assert len(line) <= 120


async def test_the_name_is_shortened_not_left_out_before_the_score_is() -> None:
    line = await _line(MlraApp(events=_named("finished")), 60)
    assert "edge-llm-co…" in line and "0.812" in line and "q quit" in line, line
    assert len(line) <= 60


async def test_replay_keeps_the_name_beside_where_its_cursor_is(tmp_path: Path) -> None:
    app = ReplayApp(ReplayModel(_named("finished"), SnapshotStore(tmp_path)))
    line = await _line(app, 80, ReplayStatusBar)
    assert "edge-llm-co" in line and "REPLAY" in line and "step" in line, line
    assert len(line) <= 80
