"""The Resources and Files panes show the run as it stands: no CPU figure once the run
ended or was stopped, and a run started --paused shows its workspace in Files."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlra import events as ev
from mlra.console.panes.files import FilesPane
from mlra.console.screens.screens import ConfirmScreen
from tests.console.test_console_controls import ANSWER, REPORT, is_, live, worker
from tests.console.test_toasts import _recorded, _resources, _settle
from tests.scripts import call, turn


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
        await run.shown(lambda app: pane.border_subtitle == "1 entry")  # not "1 entries"
        if size[0] < 130:
            await run.pilot.press("F")  # back to the transcript, where Space resumes
        await run.pilot.press("space")
        assert (await run.finished()).reason == "submitted"


async def test_a_gpu_whose_utilisation_nvml_does_not_give_is_shown_with_its_memory() -> None:
    """Some virtual GPUs answer NVML's utilisation with NOT_SUPPORTED: the GPU, its name
    and memory are still shown (it was left out of the sample, and the pane said no GPU)."""
    from textual.app import App, ComposeResult

    from mlra.agent.record.state import fold
    from mlra.console.panes.resources import ResourcesPane

    class OnePane(App[None]):
        def compose(self) -> ComposeResult:
            yield ResourcesPane(id="resources")

    gpu = ev.GpuSample(
        index=0, name="NVIDIA H200", util_percent=None, mem_used_mb=2048, mem_total_mb=143771
    )
    events: list[ev.Event] = [
        ev.RunStarted(
            run_id="r", task="t", task_title="T", task_dir="/t", model="baseline",
            limits=ev.Limits(time_limit_s=600),
            sandbox=ev.SandboxInfo(kind="local", isolation="bwrap", network=False, workdir="/workspace", workspace="/w"),
        ),
        ev.ResourceSample(
            t=1.0, cpu_percent=5, ram_used_mb=1000, ram_total_mb=8000, disk_workspace_mb=1, gpus=[gpu]
        ),
    ]  # fmt: skip
    app = OnePane()
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(ResourcesPane)
        for event in events:
            pane.feed(event)
        pane.show(fold(events), 2.0)
        await pilot.pause()
        text = str(pane.content)
    assert "GPU0 util n/a" in text and "mem 2.0 GB / 140.4 GB" in text and "NVIDIA H200" in text
    assert "no GPU" not in text
