"""Small things the console said that were not so (issue 25): the status line showed
an edited call's original command, and named the supervisor's call while a pause held
the worker between its steps; a call with no arguments read `validate 3s:`; toasts
covered the transcript's newest lines at 80x24; the Resources pane kept the last CPU
figure once the run had stopped; and a run started `--paused` must show the workspace
as it is at its start.

Live runs are driven with Textual's Pilot against the scripted model server (the real
OpenAI SDK over loopback); the recorded run of the snapshot tests gives fixed screens.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from textual.geometry import Region
from textual.widgets import TextArea
from textual.widgets._toast import Toast

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.record.state import RunState, fold
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.apps.app import MlraApp
from mlra.console.panes.files import FilesPane
from mlra.console.panes.resources import ResourcesPane
from mlra.console.panes.status import activity
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.screens.screens import ConfirmScreen, EditArgsScreen
from mlra.tasks.spec import load_task
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from tests.console.console_fixtures import Stage, recorded_run, recorded_workspace
from tests.console.test_console_controls import ANSWER, REPORT, Live, Watch, is_, live, worker
from tests.console.test_console_status import status_line
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn

APPROVAL_TOAST = (
    "bash waits for your approval (bash matching 'rm -rf'): a approve · e edit · r reject\n"
    "(commands, jobs and the clock are held meanwhile)"
)


# --- the status line --------------------------------------------------------------------


async def test_the_status_line_shows_an_edited_call_as_it_runs(
    tmp_path: Path, answer_task: Path
) -> None:
    edited = "until [ -f go ]; do sleep 0.05; done; echo 41 > answer.txt"
    async with live(
        tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash:answer.txt"]
    ) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        await run.shown(lambda app: app.state.pending_approval is not None)
        assert "echo 42 > answer.txt" in status_line(run.app)  # what the model asked for
        await run.pilot.press("e")
        await run.shown(lambda app: isinstance(app.screen, EditArgsScreen))
        run.app.screen.query_one(TextArea).text = json.dumps({"command": edited})
        await run.pilot.press("ctrl+s")
        # The call runs as edited (it waits for `go`): the line shows what runs.
        await run.shown(lambda app: "until [ -f go ]" in status_line(app))
        line = status_line(run.app)
        assert "bash" in line and "echo 42" not in line, line
        (run.controller.workspace / "go").touch()
        await run.watch.wait(
            lambda e: isinstance(e, ev.ToolResult) and e.call_id == waiting.call_id  # type: ignore[attr-defined]
        )
        await run.finished()
    assert (run.controller.workspace / "answer.txt").read_text().strip() == "41"


async def test_paused_between_worker_steps_the_line_names_the_worker(
    tmp_path: Path, answer_task: Path
) -> None:
    script = worker(turn("", call("bash", command="echo 1 > a.txt")), ANSWER, REPORT)
    async with live(tmp_path, answer_task, script, start_paused=True) as run:
        await run.watch.wait(is_(ev.Control, action="pause", source="start"))
        seen = []
        for _ in range(4):  # the plan, the assignment, the worker's steps 1 and 2
            mark = run.watch.events[-1].seq
            await run.pilot.press("n")
            await run.watch.wait(is_(ev.Control, action="pause", source="step"), after=mark)
            # The status line is redrawn as the phase changes (to paused).
            await run.shown(lambda app: "PAUSED" in status_line(app))
            seen.append(status_line(run.app))
        await run.pilot.press("space")
        assert (await run.finished()).reason == "submitted"
    after_plan, after_assign, after_step_1, after_step_2 = seen
    assert "assign_subtask" not in after_plan
    # The supervisor's assign_subtask is running, but it only waits on its worker.
    for line in (after_assign, after_step_1, after_step_2):
        assert "assign_subtask" not in line, line
    assert "worker before step 1 (subtask 1)" in after_assign
    assert "worker before step 2 (subtask 1)" in after_step_1
    assert "worker before step 3 (subtask 1)" in after_step_2


def _state_with(*events: ev.Event) -> RunState:
    sandbox = ev.SandboxInfo(
        kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/w"
    )
    started = ev.RunStarted(
        run_id="r",
        task="t",
        task_title="t",
        model="m",
        limits=ev.Limits(time_limit_s=60),
        sandbox=sandbox,
    )
    for i, event in enumerate((started, *events), start=1):
        event.seq, event.t = i, float(i)
    return fold([started, *events])


def test_a_call_with_no_arguments_has_no_colon_after_its_name() -> None:
    validate = ev.ToolCall(call_id="c1", agent="worker", tool="validate", arguments={})
    running = [t.plain for t in activity(_state_with(validate), elapsed_s=5.0)]
    assert running and all(not t.rstrip().endswith(":") for t in running), running
    assert running[0] == "validate 3s"
    asked = ev.ApprovalRequested(call_id="c1", tool="validate", arguments={}, reason="validate")
    waiting = [t.plain for t in activity(_state_with(validate, asked), elapsed_s=5.0)]
    assert waiting[0] == "validate (validate)", waiting
    assert all(":" not in t for t in waiting), waiting


# --- recorded screens -------------------------------------------------------------------


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


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_resources_show_no_load_figure_once_the_run_ended(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    running = _recorded("running", tmp_path)
    async with running.run_test(size=size) as pilot:
        await _settle(pilot)
        assert "99%" in _resources(running)  # the last sample's CPU, while the run runs
    finished = _recorded("finished", tmp_path / "2")
    async with finished.run_test(size=size) as pilot:
        await _settle(pilot)
        text = _resources(finished)
        assert "%" not in text.split("Time")[0], text
        assert "CPU  – run ended" in text, text


async def test_resources_after_a_stop_say_stopped(tmp_path: Path, answer_task: Path) -> None:
    slow = turn("", call("bash", command="until [ -f go ]; do sleep 0.05; done"))
    async with live(tmp_path, answer_task, worker(slow, ANSWER, REPORT)) as run:
        await run.watch.wait(is_(ev.ResourceSample))
        await run.shown(lambda app: "CPU  " in _resources(app) and "%" in _resources(app))
        await run.pilot.press("s")
        await run.shown(lambda app: isinstance(app.screen, ConfirmScreen))
        await run.pilot.press("y")
        finished = await run.finished()
        await run.shown(lambda app: app.state.finished is not None)
        await run.shown(lambda app: "CPU  – run stopped" in _resources(app))
        text = _resources(run.app)
    assert finished.reason == "stopped"
    assert "%" not in text.split("Time")[0], text


# --- a call waiting for approval holds the jobs, and the console says so -----------------


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


# --- Files at the start of a run started --paused ----------------------------------------


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
async def test_paused_at_the_start_the_files_tree_shows_the_workspace(
    tmp_path: Path, answer_task: Path, size: tuple[int, int]
) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), start_paused=True) as run:
        await run.pilot.resize_terminal(*size)
        await run.watch.wait(is_(ev.Control, action="pause", source="start"))
        await run.shown(lambda app: app.state.phase == "paused")
        if size[0] < 130:
            await run.pilot.press("F")  # the compact layout shows Files on demand
        pane = run.app.query_one(FilesPane)
        await run.shown(lambda app: "question.txt" in pane._tree_nodes)
        assert pane.region.area > 0
        if size[0] < 130:
            await run.pilot.press("F")  # back to the transcript, where Space resumes
        await run.pilot.press("space")
        assert (await run.finished()).reason == "submitted"
