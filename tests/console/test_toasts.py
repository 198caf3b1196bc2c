"""Toasts leave the transcript's newest lines in view (at 80x24 too: a snapshot), and a
call waiting for approval says in one what happens to the jobs meanwhile. Recorded runs
give fixed screens; live runs are driven with Textual's Pilot against the scripted model
server."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from textual.geometry import Region
from textual.widgets._toast import Toast

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.apps.app import MlraApp
from mlra.console.panes.files import FilesPane
from mlra.console.panes.resources import ResourcesPane
from mlra.console.panes.transcript import TranscriptPane
from mlra.tasks.spec import load_task
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from tests.console.console_fixtures import Stage, recorded_run, recorded_workspace
from tests.console.test_console_controls import ANSWER, REPORT, Live, Watch, is_, worker
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn

APPROVAL_TOAST = (
    "bash waits for your approval (bash matching 'rm -rf'): a approve · e edit · r reject\n"
    "(commands, jobs and the clock are held meanwhile)"
)


def _recorded(stage: Stage, tmp_path: Path) -> MlraApp:
    workspace = recorded_workspace(tmp_path / "workspace")
    files = LocalSandbox(workspace, SandboxSpec(), isolation_mode="none")
    return MlraApp(events=recorded_run(stage), files=files)


async def _settle(pilot: Any) -> None:
    await pilot.app.query_one(FilesPane).refresh_tree()
    await pilot.pause()


async def _toast(pilot: Any) -> None:
    await _settle(pilot)
    pilot.app.notify(APPROVAL_TOAST, timeout=60, markup=False)
    await pilot.pause()
    await pilot.pause()


@pytest.fixture
def _utc(monkeypatch: pytest.MonkeyPatch) -> Any:
    """File times are shown in local time; pin it so the snapshots match anywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _transcript_text_region(app: MlraApp) -> Region:
    return app.query_one(TranscriptPane).region


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (160, 48)])
async def test_toasts_leave_the_newest_transcript_lines_visible(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    app = _recorded("approval", tmp_path)
    async with app.run_test(size=size, notifications=True) as pilot:
        await _toast(pilot)
        toasts = list(app.screen.query(Toast))
        assert toasts, "no toast shown"
        transcript = _transcript_text_region(app)
        assert transcript.area > 0
        for toast in toasts:
            assert toast.region.area > 0
            assert not toast.region.overlaps(transcript), (toast.region, transcript)
            # The whole toast is on the screen (its text is read, not cut).
            assert Region(0, 0, *size).contains_region(toast.region)


def test_toast_at_80x24_snapshot(snap_compare: Any, tmp_path: Path, _utc: Any) -> None:
    """The waiting call's toast over the left column; the transcript's newest lines (the
    call that waits) in full view."""
    assert snap_compare(_recorded("approval", tmp_path), terminal_size=(80, 24), run_before=_toast)


def _resources(app: MlraApp) -> str:
    content = app.query_one(ResourcesPane).content
    return getattr(content, "plain", str(content))


def _toasts(app: MlraApp) -> str:
    return "\n".join(str(t.render()) for t in app.screen.query(Toast))


@asynccontextmanager
async def live_with_toasts(
    tmp_path: Path, answer_task: Path, script: dict[str, Any], **config: Any
) -> AsyncIterator[Live]:
    """A live run in the console as `live` makes one, with its toasts shown (a test's
    app shows none unless asked)."""
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        cfg = RunConfig(
            task="answer", model="openai/test", runs_dir=tmp_path, isolation="none", **config
        )
        controller = RunController(cfg, load_task(answer_task), provider)
        controller.prepare()
        watch = Watch(controller)
        app = MlraApp(controller=controller, make_agent=agent_for)
        async with app.run_test(size=(160, 48), notifications=True) as pilot:
            yield Live(app, pilot, watch, server, controller)


@pytest.mark.parametrize("runs_jobs", [False, True])
async def test_a_waiting_call_says_what_happens_to_the_jobs_meanwhile(
    tmp_path: Path, answer_task: Path, runs_jobs: bool
) -> None:
    ticker = "while [ ! -f stop ]; do echo tick; sleep 0.1; done"
    script = worker(
        turn("", {"name": "job_start", "arguments": {"command": ticker, "name": "ticker"}}),
        ANSWER,
        turn("", call("job_wait", job="ticker", timeout=60)),
        REPORT,
    )
    async with live_with_toasts(
        tmp_path, answer_task, script, breakpoints=["bash"], break_runs_jobs=runs_jobs
    ) as run:
        await run.watch.wait(is_(ev.ApprovalRequested))
        await run.shown(lambda app: app.state.phase == "awaiting_approval")
        word = "running" if runs_jobs else "suspended"
        await run.shown(lambda app: f"job-1 ticker {word}" in _resources(app))
        toast = "jobs run on" if runs_jobs else "jobs and the clock are held"
        await run.shown(lambda app: toast in _toasts(app))
        await run.pilot.press("a")
        await run.shown(lambda app: "job-1 ticker running" in _resources(app))
        (run.controller.workspace / "stop").touch()
        assert (await run.finished()).reason == "submitted"
