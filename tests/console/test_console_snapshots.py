"""The console's main screen in its states, from a recorded run (so every
figure on screen is fixed): running, paused with a tool call waiting for
approval, finished with a score, retrying the model, the compact layout of a
100x30 terminal and the smallest, 80x24 (help included)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from mlra.console.apps.app import MlraApp
from mlra.console.panes.files import FilesPane
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from tests.console.console_fixtures import Stage, recorded_run, recorded_workspace


@pytest.fixture(autouse=True)
def _utc(monkeypatch: pytest.MonkeyPatch) -> Any:
    """File times are shown in local time; pin it so the snapshots match anywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _app(stage: Stage, tmp_path: Path) -> MlraApp:
    workspace = recorded_workspace(tmp_path / "workspace")
    files = LocalSandbox(workspace, SandboxSpec(), isolation_mode="none")
    return MlraApp(events=recorded_run(stage), files=files)


async def _settle(pilot: Any) -> None:
    await pilot.app.query_one(FilesPane).refresh_tree()
    await pilot.pause()


def test_running(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(_app("running", tmp_path), terminal_size=(160, 48), run_before=_settle)


def test_paused_with_a_tool_call_waiting(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(_app("approval", tmp_path), terminal_size=(160, 48), run_before=_settle)


def test_finished_with_a_score(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(_app("finished", tmp_path), terminal_size=(160, 48), run_before=_settle)


def test_compact_layout_100x30(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(_app("running", tmp_path), terminal_size=(100, 30), run_before=_settle)


def test_compact_layout_shows_files_on_demand(snap_compare: Any, tmp_path: Path) -> None:
    async def files(pilot: Any) -> None:
        await pilot.press("F")
        await _settle(pilot)
        await pilot.press("tab")
        await pilot.pause()

    assert snap_compare(_app("running", tmp_path), terminal_size=(100, 30), run_before=files)


def test_tz_is_pinned() -> None:
    assert os.environ.get("TZ") == "UTC"


def test_retrying_the_model(snap_compare: Any, tmp_path: Path) -> None:
    """The status line says the model is being retried, and after what."""
    assert snap_compare(_app("retrying", tmp_path), terminal_size=(160, 48), run_before=_settle)


@pytest.mark.parametrize("stage", ["running", "approval", "finished", "retrying"])
def test_80x24(snap_compare: Any, tmp_path: Path, stage: Stage) -> None:
    """The smallest terminal: the current plan step, the score and q stay on screen."""
    assert snap_compare(_app(stage, tmp_path), terminal_size=(80, 24), run_before=_settle)


def test_help_fits_80x24(snap_compare: Any, tmp_path: Path) -> None:
    async def help(pilot: Any) -> None:
        await _settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(_app("approval", tmp_path), terminal_size=(80, 24), run_before=help)
