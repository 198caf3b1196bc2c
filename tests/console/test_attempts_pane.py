"""The Attempts pane (issue 27): a search's tree in the console, live and in replay, and
its keys: Enter opens an attempt's own transcript and files, D diffs two attempts'
workspaces beside their scores, x stops a running attempt, p promotes (submits) one,
m messages one. The run is a folder written by hand: the run's log with three drafts
(one buggy, with why), an improvement of the best and a debug attempt still running,
and each attempt's own folder with its log and a tiny workspace."""

from __future__ import annotations

import asyncio
import io
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console
from rich.text import Text
from textual.widgets import Input, OptionList, Static

from mlra import events as ev
from mlra.agent.control.steering import Steering
from mlra.agent.loop.attempts import AttemptManager
from mlra.agent.loop.clock import RunClock
from mlra.agent.loop.controls import Controls
from mlra.agent.loop.ending import Ending
from mlra.agent.record.attempt_tree import AttemptTree
from mlra.agent.record.eventlog import EVENTS_FILE, encode_event
from mlra.agent.record.run_result import result_of
from mlra.agent.record.state import RunState, fold
from mlra.console.apps.app import MlraApp
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.panes.attempts import AttemptsPane, attempt_lines
from mlra.console.panes.files import FilesPane
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.screens.attempt_screens import AttemptScreen, PickAttemptScreen, broken_at_words
from mlra.console.screens.screens import ConfirmScreen, DiffScreen, PromptScreen
from mlra.console.text.replay import ReplayModel
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from tests.console.console_fixtures import EPOCH, recorded_workspace

TRAIN = (
    "import torch\n\nlr = {lr}\nsteps = {steps}\n\n\ndef main() -> None:\n    print(lr, steps)\n"
)


@pytest.fixture(autouse=True)
def _utc(monkeypatch: pytest.MonkeyPatch) -> Any:
    """File times are shown in local time; pin it so the snapshots match anywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


class Log:
    def __init__(self) -> None:
        self.events: list[ev.Event] = []

    def add(self, t: float, event: ev.Event) -> ev.Event:
        event.seq, event.t, event.ts = len(self.events) + 1, t, EPOCH + t
        self.events.append(event)
        return event

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(encode_event(e) for e in self.events))


def _started(run_id: str) -> ev.RunStarted:
    return ev.RunStarted(
        run_id=run_id,
        task="tiny-lm",
        task_title="Pretrain a tiny language model from scratch on CPU",
        model="anthropic/claude-sonnet-4-6",
        limits=ev.Limits(time_limit_s=1800, max_steps=60, max_cost_usd=5.0),
        sandbox=ev.SandboxInfo(
            kind="local",
            isolation="bwrap",
            network=False,
            workdir="/workspace",
            workspace="/runs/x/workspace",
        ),
    )


def _finished(attempt: str, parent: str | None, **fields: Any) -> ev.AttemptFinished:
    defaults: dict[str, Any] = {
        "metric": "minimal_pair_accuracy",
        "higher_is_better": True,
        "steps": 6,
        "tokens": 21_000,
        "cost_usd": 0.08,
    }
    return ev.AttemptFinished(attempt=attempt, parent=parent, **{**defaults, **fields})


def search_log() -> Log:
    """The run's own log: a1 and a3 validated drafts, a2 a buggy draft, a4 an improvement
    of a3 (the best), a5 debugging a2, still running."""
    log = Log()
    log.add(0, _started("20261126-120000-tiny-lm-srch"))
    log.add(2, ev.SupervisorMessage(text="Search: three drafts, then improve the best."))
    for i, (what, t) in enumerate(
        [
            ("a 2-layer model, lr 0.01", 3),
            ("a 4-layer model with a cosine schedule", 4),
            ("a 2-layer model trained twice as long", 5),
        ],
        start=1,
    ):
        log.add(
            t,
            ev.AttemptStarted(
                attempt=f"a{i}",
                operator="draft",
                instructions=what,
                folder=f"attempts/a{i}",
                time_limit_s=500,
            ),
        )
    log.add(
        130,
        _finished(
            "a1",
            None,
            status="validated",
            score=0.7612,
            summary="trained 2 layers at lr 0.01",
            kept="attempts/a1/validations/v1",
            sha256="aa",
            duration_s=127,
        ),
    )
    log.add(
        141,
        _finished(
            "a2",
            None,
            status="buggy",
            why="train.py: NameError: name 'sched' is not defined",
            summary="added a cosine schedule",
            duration_s=137,
        ),
    )
    log.add(
        190,
        _finished(
            "a3",
            None,
            status="validated",
            score=0.7905,
            summary="2 layers for 600 steps",
            kept="attempts/a3/validations/v1",
            sha256="cc",
            duration_s=185,
        ),
    )
    log.add(
        191,
        ev.AttemptStarted(
            attempt="a4",
            parent="a3",
            operator="improve",
            instructions="lower the learning rate to 0.003",
            folder="attempts/a4",
            time_limit_s=400,
        ),
    )
    log.add(
        192,
        ev.AttemptStarted(
            attempt="a5",
            parent="a2",
            operator="debug",
            instructions="fix the NameError in train.py",
            folder="attempts/a5",
            time_limit_s=400,
        ),
    )
    log.add(
        350,
        _finished(
            "a4",
            "a3",
            status="validated",
            score=0.8231,
            summary="lr 0.003, 600 steps",
            kept="attempts/a4/validations/v1",
            sha256="dd",
            duration_s=159,
        ),
    )
    log.add(
        400,
        ev.ResourceSample(
            cpu_percent=97,
            ram_used_mb=6_200,
            ram_total_mb=24_000,
            disk_workspace_mb=3.4,
            # The attempts' training, summed: the run's own sandbox only waits on them.
            run_cpu_percent=188.0,
            run_mem_mb=1_400.0,
            run_processes=4,
        ),
    )
    return log


def attempt_log(attempt: str, command: str, output: str, score: float | None) -> Log:
    """An attempt's own log: a worker step, its command and, where it scored, its validation."""
    log = Log()
    log.add(0, _started(attempt))
    log.add(1, ev.WorkerThought(text=f"Working on {attempt}: {command}.", turn=1, step=1))
    log.add(
        2,
        ev.ToolCall(
            call_id=f"{attempt}-1",
            agent="worker",
            tool="bash",
            arguments={"command": command},
            turn=1,
            step=1,
        ),
    )
    log.add(
        60,
        ev.ToolResult(
            call_id=f"{attempt}-1",
            tool="bash",
            agent="worker",
            ok=True,
            output=f"{output}\n[exit code 0, 58 s]",
            exit_code=0,
            duration_s=58,
        ),
    )
    if score is not None:
        log.add(
            61,
            ev.Validation(
                artifact="submission",
                ok=True,
                metric="minimal_pair_accuracy",
                score=score,
                sha256={"a1": "aa", "a3": "cc", "a4": "dd"}.get(attempt),
                metrics={
                    "pairs/acc": score,
                    "heldout/word_perplexity": round(300 * (1 - score), 1),
                },
            ),
        )
    return log


def search_run(root: Path) -> Path:
    """The run folder: its log, its workspace, and each attempt's folder."""
    run_dir = root / "20261126-120000-tiny-lm-srch"
    search_log().write(run_dir / EVENTS_FILE)
    recorded_workspace(run_dir / "workspace")
    setups = {
        "a1": ("0.01", "300", 0.7612),
        "a2": ("0.01", "300", None),
        "a3": ("0.01", "600", 0.7905),
        "a4": ("0.003", "600", 0.8231),
        "a5": ("0.01", "300", None),
    }
    for attempt, (lr, steps, score) in setups.items():
        folder = run_dir / "attempts" / attempt
        command = f"python train.py --lr {lr} --steps {steps}"
        attempt_log(attempt, command, f"val acc {score}", score).write(folder / EVENTS_FILE)
        workspace = folder / "workspace"
        workspace.mkdir(parents=True)
        (workspace / "train.py").write_text(TRAIN.format(lr=lr, steps=steps))
        (workspace / "README.md").write_text("# tiny-lm\n")
        if score is not None:
            (folder / "validations" / "v1").mkdir(parents=True)
    a4 = run_dir / "attempts" / "a4" / "workspace"
    (a4 / "NOTES.md").write_text("lower lr helped\n")
    # What an agent may leave: a link out of its workspace and a FIFO; neither is read.
    (a4 / "leak.txt").symlink_to("/etc/hostname")
    os.mkfifo(a4 / "pipe.txt")
    return run_dir


def plain(renderable: Any) -> str:
    console = Console(width=160, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def pane_lines(app: MlraApp) -> list[str]:
    pane = app.query_one(AttemptsPane)
    lines: list[str] = []
    for i in range(pane.option_count):
        prompt = pane.get_option_at_index(i).prompt
        assert isinstance(prompt, Text)
        lines.append(prompt.plain)
    return lines


def recorded_app(run_dir: Path) -> MlraApp:
    files = LocalSandbox(run_dir / "workspace", SandboxSpec(), isolation_mode="none")
    return MlraApp(events=search_log().events, files=files, run_dir=run_dir)


async def until(pilot: Any, done: Callable[[], object], what: str) -> None:
    """Let the app run until `done()` holds (an event, a screen), a bounded number of
    turns of its loop."""
    for _ in range(200):
        if done():
            return
        await pilot.pause()
    raise AssertionError(f"never happened: {what}")


async def select(pilot: Any, attempt: str) -> None:
    pane = pilot.app.query_one(AttemptsPane)
    await pilot.press("A")  # to the Attempts pane, from wherever the focus was
    assert pilot.app.focused is pane
    pane.highlighted = pane.get_option_index(attempt)
    await pilot.pause()


# --- what the pane shows ----------------------------------------------------------------


async def test_the_pane_shows_the_tree_best_bold_buggy_red_running_marked(tmp_path: Path) -> None:
    app = recorded_app(search_run(tmp_path))
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        pane = app.query_one(AttemptsPane)
        assert pane.display and pane.border_title == "Attempts"
        assert pane.border_subtitle == "5 tried · 1 running · best a4 0.8231 ↑"
        lines = pane_lines(app)
        # Tree order: each attempt under the one it started from.
        assert [line[2:6] for line in lines] == ["a1  ", "a2  ", "└ a5", "a3  ", "└ a4"]
        a1, a2, a5, a3, a4 = lines
        assert "a1" in a1 and "draft" in a1 and "0.7612" in a1 and "2m07s" in a1
        assert "draft" in a3 and "0.7905" in a3 and "2 layers for 600 steps" in a3
        assert "trained 2 layers at lr 0.01" in a1
        assert a2.startswith("✗ a2") and "buggy" in a2 and "NameError" in a2
        assert a5.startswith("● └ a5")
        assert "debug" in a5 and "running" in a5 and "fix the NameError" in a5
        # a5 started at 192 s; the log's last event is at 400 s: it has run 3m28s.
        assert "3m28s" in a5
        assert a4.startswith("★ └ a4") and "improve" in a4 and "0.8231" in a4
        prompts = [pane.get_option_at_index(i).prompt for i in range(pane.option_count)]
        assert all(isinstance(p, Text) for p in prompts)
        assert "bold" in str(prompts[4].style)  # the best
        assert "red" in str(prompts[1].style)  # the buggy one


def test_an_attempt_out_of_time_is_marked_apart_from_a_buggy_one() -> None:
    """An attempt its time cut short is not shown as a bug in its recipe: marked ◷, its
    status "out of time" and its why in yellow, not red."""
    tree = AttemptTree()
    why = "no artifact of its own: the submission in its workspace is a1's, unchanged"
    for event in (
        ev.AttemptStarted(attempt="a1", operator="variant", folder="attempts/a1"),
        ev.AttemptStarted(attempt="a2", parent="a1", operator="variant", folder="attempts/a2"),
        ev.AttemptFinished(attempt="a2", parent="a1", status="out of time", why=why),
    ):
        tree.apply(event)
    line = dict(attempt_lines(tree, 100.0, 160))["a2"]
    assert line.plain.startswith("◷ └ a2") and "out of time" in line.plain, line.plain
    assert "a1's, unchanged" in line.plain
    assert "red" not in str(line.style)
    assert any("yellow" in str(span.style) for span in line.spans)


def test_a_running_attempt_ticks() -> None:
    tree = AttemptTree()
    for event in search_log().events:
        tree.apply(event)
    before = dict(attempt_lines(tree, 400.0, 120))
    after = dict(attempt_lines(tree, 465.0, 120))
    assert "3m28s" in before["a5"].plain and "4m33s" in after["a5"].plain
    assert all(before[a].plain == after[a].plain for a in ("a1", "a2", "a3", "a4"))


async def test_a_running_attempts_line_says_how_it_does_from_its_own_log(
    tmp_path: Path,
) -> None:
    """The transcript of a search shows only the policy's waits: a running attempt's line
    said `running 3m28s` and nothing of whether its training went anywhere."""
    run_dir = search_run(tmp_path)
    log = Log()
    log.add(0, _started("a5"))
    call = ev.ToolCall(call_id="a5-1", agent="worker", tool="bash", turn=1, step=1,
                       arguments={"command": "python train.py --steps 600"})  # fmt: skip
    log.add(2, call)
    log.add(30, ev.ToolOutput(call_id="a5-1", text="step 100/600 loss 5.19\n"))
    log.add(60, ev.ToolOutput(call_id="a5-1", text="step 200/600 loss 4.62\n"))
    log.write(run_dir / "attempts" / "a5" / EVENTS_FILE)
    for size in ((160, 48), (200, 50)):
        app = recorded_app(run_dir)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            a5 = next(line for line in pane_lines(app) if "a5" in line[:8])
            assert "running 3m28s" in a5 and "step 200/600 loss 4.62 · ETA 1m56s" in a5, a5
            if size[0] == 200:
                assert "fix the" in a5  # what it was asked, where there is room
    model = ReplayModel.open(run_dir)
    replay = ReplayApp(model)
    async with replay.run_test(size=(160, 48)) as pilot:
        model.go(len(search_log().events) - 1)
        replay.show_cursor()
        await pilot.pause()
        lines = pane_lines(replay)
        assert any("a5" in line for line in lines)
        assert not any("step 200" in line for line in lines)  # the cursor's past, not now


async def test_a_running_attempts_validation_ticks_on_its_line(tmp_path: Path) -> None:
    """A validation graded host-side prints nothing for minutes (tiny-lm's took 2 minutes
    on a busy machine) while the run's CPU figure, its sandboxes' only, reads 0%: the
    line said `running 7m41s the recipe as it is · validate`, standing still but for
    the attempt's own clock. How long the validation has run (by the wall clock: a
    closing validation's log goes quiet) says it goes on."""
    run_dir = search_run(tmp_path)
    log = Log()
    log.add(0, _started("a5"))
    call = ev.ToolCall(call_id="a5-2", agent="worker", tool="validate", turn=2, step=2,
                       arguments={"path": "submission"})  # fmt: skip
    log.add(331, call)
    call.ts = time.time() - 119  # begun two minutes ago, nothing logged since
    log.write(run_dir / "attempts" / "a5" / EVENTS_FILE)
    app = recorded_app(run_dir)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        a5 = next(line for line in pane_lines(app) if "a5" in line[:8])
        assert re.search(r"validate (1m59s|2m0\ds)", a5), a5


async def test_the_files_pane_of_a_search_says_whose_files_it_shows(tmp_path: Path) -> None:
    """A search's own workspace stays as the task gave it while its attempts train in
    theirs: the pane titled plain `Files` looked like a run doing nothing."""
    app = recorded_app(search_run(tmp_path))
    async with app.run_test(size=(160, 48)) as pilot:
        await app.query_one(FilesPane).refresh_tree()
        await pilot.pause()
        assert app.query_one(FilesPane).border_title == "Files: the search's own"
    from tests.console.console_fixtures import recorded_run

    plain_run = MlraApp(events=recorded_run("running"), files=app.files_source)
    async with plain_run.run_test(size=(160, 48)) as pilot:
        await plain_run.query_one(FilesPane).refresh_tree()
        await pilot.pause()
        assert plain_run.query_one(FilesPane).border_title == "Files"


async def test_a_run_without_attempts_keeps_its_layout(tmp_path: Path) -> None:
    from tests.console.console_fixtures import recorded_run

    app = MlraApp(events=recorded_run("running"))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert not app.query_one(AttemptsPane).display
        assert app.query_one(TranscriptPane).region.y == 1  # under the status line, as before
        await pilot.press("A")
        await until(pilot, lambda: "no attempts" in toasts(app), "said there are none")
        assert isinstance(app.focused, TranscriptPane)


async def _settle(pilot: Any) -> None:
    await pilot.app.query_one(FilesPane).refresh_tree()
    await select(pilot, "a4")


def test_snapshot_attempts_200x50(snap_compare: Any, tmp_path: Path) -> None:
    app = recorded_app(search_run(tmp_path))
    assert snap_compare(app, terminal_size=(200, 50), run_before=_settle)


def test_snapshot_attempts_80x24(snap_compare: Any, tmp_path: Path) -> None:
    app = recorded_app(search_run(tmp_path))
    assert snap_compare(app, terminal_size=(80, 24), run_before=_settle)


def test_snapshot_attempts_160x48(snap_compare: Any, tmp_path: Path) -> None:
    app = recorded_app(search_run(tmp_path))
    assert snap_compare(app, terminal_size=(160, 48), run_before=_settle)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_the_top_line_of_a_search_says_how_well_how_long_and_that_it_works(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """The best validated attempt and its score, the time left, at every width; the
    attempts' CPU where there is room (the run's own sandbox only waits on them)."""
    from mlra.console.panes.status import StatusBar

    app = recorded_app(search_run(tmp_path))
    async with app.run_test(size=size) as pilot:
        await _settle(pilot)
        line = plain(app.query_one(StatusBar).content)
        assert "RUNNING" in line and "a4 0.8231" in line and "left" in line
        if size[0] >= 160:
            assert "best a4 0.8231 (validated)" in line and "cpu 188%" in line


# --- opening and diffing ------------------------------------------------------------------


async def test_enter_opens_the_attempts_transcript_and_files(tmp_path: Path) -> None:
    app = recorded_app(search_run(tmp_path))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await select(pilot, "a4")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, AttemptScreen), "the attempt opened")
        screen = app.screen
        files = screen.query_one("#attempt-file-list", OptionList)
        await until(pilot, lambda: files.option_count == 3, "its files listed")
        listed = [str(files.get_option_at_index(i).prompt) for i in range(3)]
        assert [name.split()[0] for name in listed] == ["NOTES.md", "README.md", "train.py"]
        transcript = screen.query_one("#attempt-transcript", TranscriptPane)
        shown = " ".join(str(entry.render()) for entry in transcript.children)
        assert "python train.py --lr 0.003 --steps 600" in shown
        assert "Working on a4" in shown
        details = str(screen.query_one("#attempt-details", Static).content)
        assert "a1" not in details.split("lineage: ")[1].split("\n")[0]
        assert "lineage: a3 > a4" in details and "lower the learning rate" in details
        # a file's preview, read from the attempt's own workspace
        files.focus()
        files.highlighted = 2
        preview = screen.query_one("#attempt-preview", Static)
        await until(pilot, lambda: "lr = 0.003" in plain(preview.content), "train.py previewed")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, AttemptScreen), "closed")


async def test_tab_moves_from_the_attempts_transcript_to_its_files(tmp_path: Path) -> None:
    """The dialog says "Tab moves to the files": each call of the transcript takes the
    focus too, so Tab went through the attempt's calls first, one a press."""
    from mlra.console.panes.transcript_entries import ToolEntry

    app = recorded_app(search_run(tmp_path))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await select(pilot, "a4")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, AttemptScreen), "the attempt opened")
        screen = app.screen
        await until(pilot, lambda: screen.query(ToolEntry), "its calls shown")
        files = screen.query_one("#attempt-file-list", OptionList)
        await pilot.press("tab")
        await until(pilot, lambda: app.focused is files, "the files focused")
        await pilot.press("down")
        preview = screen.query_one("#attempt-preview", Static)
        await until(
            pilot, lambda: "select a file" not in plain(preview.content), "the first file previewed"
        )
        await pilot.press("shift+tab")
        transcript = screen.query_one("#attempt-transcript", TranscriptPane)
        await until(pilot, lambda: app.focused is transcript, "back to the transcript")
        screen.query(ToolEntry).first().focus()  # a call of the transcript has the focus
        await pilot.press("tab")
        await until(pilot, lambda: app.focused is files, "from a call to the files")


async def test_D_diffs_two_attempts_files_beside_their_scores(tmp_path: Path) -> None:
    app = recorded_app(search_run(tmp_path))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await select(pilot, "a3")
        await pilot.press("D")
        await until(pilot, lambda: isinstance(app.screen, PickAttemptScreen), "asked which")
        choices = app.screen.query_one(OptionList)
        assert "a3" not in [choices.get_option_at_index(i).id for i in range(choices.option_count)]
        choices.highlighted = choices.get_option_index("a4")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen), "the diff shown")
        screen = app.screen
        assert isinstance(screen, DiffScreen)
        assert screen.title_text == "a3 → a4: their workspaces"
        diff = screen.diff.splitlines()
        assert "--- a3/train.py" in diff and "+++ a4/train.py" in diff
        assert "-lr = 0.01" in diff and "+lr = 0.003" in diff
        assert "+++ a4/NOTES.md" in diff and "+lower lr helped" in diff
        assert not any("README.md" in line for line in diff)  # alike: left out
        assert not any("leak" in line or "pipe" in line for line in diff)  # never read
        text = plain(app.screen.query_one("#diff-header", Static).content)
        assert "0.7905" in text and "0.8231 (best)" in text
        assert "heldout/word_perplexity" in text and "53.1" in text and "62.9" in text


async def test_the_diffs_metric_names_stay_whole_at_80_columns(tmp_path: Path) -> None:
    """Rich folds a narrow column mid-word (`heldout/wor` / `d_perplexity`): the name
    column is as wide as the longest name (up to 36), broken only after `/` or `_`."""
    assert broken_at_words("tiny_lm_val_heldout/bits_per_byte_of_the_text", 36) == (
        "tiny_lm_val_heldout/bits_per_byte_\nof_the_text"
    )
    app = recorded_app(search_run(tmp_path))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await select(pilot, "a3")
        await pilot.press("D")
        await until(pilot, lambda: isinstance(app.screen, PickAttemptScreen), "asked which")
        choices = app.screen.query_one(OptionList)
        choices.highlighted = choices.get_option_index("a4")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen), "the diff shown")
        header = app.screen.query_one("#diff-header", Static)
        lines = [strip.text for strip in header.render_lines(header.region.reset_offset)]
        assert any("heldout/word_perplexity" in line for line in lines), lines


async def test_replay_shows_the_tree_as_it_was_at_the_cursor(tmp_path: Path) -> None:
    run_dir = search_run(tmp_path)
    model = ReplayModel.open(run_dir)
    events = search_log().events
    app = ReplayApp(model)
    async with app.run_test(size=(160, 48)) as pilot:

        async def at(index: int) -> None:
            model.go(index)
            app.show_cursor()
            await pilot.pause()

        await at(1)
        assert not app.query_one(AttemptsPane).display
        a4_started = next(
            i
            for i, e in enumerate(events)
            if isinstance(e, ev.AttemptStarted) and e.attempt == "a4"
        )
        await at(a4_started)
        lines = pane_lines(app)
        assert len(lines) == 4 and "running" in lines[-1] and "a4" in lines[-1]
        assert (
            app.query_one(AttemptsPane).border_subtitle == "4 tried · 1 running · best a3 0.7905 ↑"
        )
        await at(len(events) - 1)
        assert "0.8231" in pane_lines(app)[-1]
        # Enter still opens an attempt in the replay (read-only: x, p, m keep their
        # replay meanings)
        await select(pilot, "a1")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, AttemptScreen), "the attempt opened")


# --- steering -----------------------------------------------------------------------------


class RecordingManager(AttemptManager):
    """The real manager's checks (submittable, stop's), with its stops recorded."""

    def __init__(self, run: Any) -> None:
        super().__init__(run)
        self.stops: list[tuple[str, str]] = []
        self.children: dict[str, Any] = {}

    def stop_now(self, attempt: str, reason: str) -> asyncio.Task[None] | None:
        """Every stop, the supervisor's (`stop`) and a person's (steering), comes here."""
        self.stops.append((attempt, reason))
        return super().stop_now(attempt, reason)

    def child(self, attempt: str) -> Any:
        return self.children.get(attempt)


class Child:
    def __init__(self) -> None:
        self.told: list[tuple[str, str]] = []

    def inject(self, target: str, text: str) -> None:
        self.told.append((target, text))


class SearchRun(Steering):
    """A run under way with the search's log behind it: the real Steering methods, a
    manager with the real checks, its events appended as the controller does (each to
    the console, as it is recorded), and the run ending when the user's stop comes."""

    def __init__(self, run_dir: Path, events: list[ev.Event]) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.controls = Controls()
        self.clock = RunClock(1800, already=400)
        self.clock.start()
        self.state = fold(events)
        self.events = list(events)
        self.sandbox = None
        self.provider = None
        self.jobs = SimpleNamespace(last_line=lambda job: None, running_ids=lambda: [])  # type: ignore[assignment]
        self.tool_step = SimpleNamespace(watch_output=lambda callback: None)
        self.catchup = SimpleNamespace(replaying=True)  # adopt() starts nothing here
        self.attempts = RecordingManager(self)
        self._subscribers: list[Callable[[ev.Event], None]] = []
        self.ending: Ending | None = None

    def subscribe(self, callback: Callable[[ev.Event], None]) -> None:
        self._subscribers.append(callback)

    def append(self, event: ev.Event) -> ev.Event:
        event.seq, event.t = len(self.events) + 1, self.clock.elapsed()
        event.ts = EPOCH + event.t
        self.events.append(event)
        self.state.apply(event)
        for callback in self._subscribers:
            callback(event)
        return event

    async def run(self, make_agent: Any) -> Any:
        self.ending = await self.wait_for_stop()
        self.append(ev.RunFinished(status=self.ending.status, reason=self.ending.reason))
        return result_of(self.state)

    def controls_of(self, action: str) -> list[ev.Control]:
        return [e for e in self.events if isinstance(e, ev.Control) and e.action == action]


def live_app(tmp_path: Path) -> tuple[MlraApp, SearchRun]:
    run_dir = search_run(tmp_path)
    events = search_log().events
    run = SearchRun(run_dir, events)
    app = MlraApp(controller=run, make_agent=lambda c: None, events=events)  # type: ignore[arg-type]
    return app, run


def toasts(app: MlraApp) -> str:
    return " | ".join(n.message for n in app._notifications)


async def test_x_stops_the_selected_running_attempt(tmp_path: Path) -> None:
    app, run = live_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await select(pilot, "a4")  # ended: nothing to stop, nothing asked
        await pilot.press("x")
        await until(pilot, lambda: "a4 has ended" in toasts(app), "refused")
        assert not isinstance(app.screen, ConfirmScreen)
        await select(pilot, "a5")
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "asked")
        await pilot.press("y")
        await until(pilot, lambda: run.attempts.stops, "the stop scheduled")
        assert run.attempts.stops == [("a5", "stopped by the user")]
        (control,) = run.controls_of("attempt_stop")
        assert control.target == "a5" and control.source == "user"
        # the manager's record of why, which its attempt_finished will say
        assert run.attempts._stopped == {"a5": "stopped by the user"}
        assert run.state.finished is None  # the run goes on


async def test_p_promotes_the_selected_attempt_and_ends_the_run_grading_it(tmp_path: Path) -> None:
    app, run = live_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await select(pilot, "a2")  # buggy: never validated, refused with why
        await pilot.press("p")
        await until(pilot, lambda: "no validated artifact" in toasts(app), "refused")
        assert not run.controls_of("promote")
        await select(pilot, "a4")
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "asked")
        await pilot.press("y")
        await until(pilot, lambda: app.result is not None, "the run ended")
        (control,) = run.controls_of("promote")
        assert control.target == "a4"
        assert run.ending == Ending(
            reason="submitted",
            by="user",
            attempt="a4",
            note="attempt a4 promoted by the user",
            message="attempt a4 promoted by the user",
        )
        # the transcript says what the user did
        shown = " ".join(str(e.render()) for e in app.query_one(TranscriptPane).children)
        assert "you: promoted attempt a4" in shown


async def test_m_messages_the_selected_running_attempts_worker(tmp_path: Path) -> None:
    app, run = live_app(tmp_path)
    child = Child()
    run.attempts.children["a5"] = child
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await select(pilot, "a5")
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, PromptScreen), "asked")
        app.screen.query_one(Input).value = "try sched = None"
        await pilot.press("enter")
        await until(pilot, lambda: child.told, "the message sent")
        assert child.told == [("worker", "try sched = None")]


def test_steering_refuses_what_does_not_apply(tmp_path: Path) -> None:
    """Without the console: stopping an ended attempt and promoting a running one are
    refused, and nothing is recorded."""
    run = SearchRun(search_run(tmp_path), search_log().events)
    assert run.stop_attempt("a4") is False and run.stop_attempt("nope") is False
    assert run.promote_attempt("a5") is False and run.promote_attempt("a2") is False
    assert not run.controls_of("attempt_stop") and not run.controls_of("promote")
    assert not run.stop_requested
    assert isinstance(run.state, RunState)


async def test_an_open_running_attempt_follows_it_to_its_end(tmp_path: Path) -> None:
    """The dialog of a running attempt reads its log again as it goes and, once the run
    records its end, says how it ended and stops reading."""
    app, run = live_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await select(pilot, "a5")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, AttemptScreen), "opened")
        screen = app.screen
        assert isinstance(screen, AttemptScreen) and screen._timer is not None
        title = screen.query_one("#attempt-title", Static)
        assert str(title.content).endswith("· running")
        run.append(_finished("a5", "a2", status="validated", score=0.8012, duration_s=300))
        await until(pilot, lambda: app.state.attempts.get("a5").finished, "folded")
        await screen.reload()
        assert str(title.content).endswith("· 0.8012")
        assert screen._timer is None
        assert "0.8012" in pane_lines(app)[2]


async def test_help_lists_the_attempts_keys_where_the_run_searches(tmp_path: Path) -> None:
    from mlra.console.screens.screens import HelpScreen

    app = recorded_app(search_run(tmp_path))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
        text = plain(app.screen.query_one("#help-text", Static).content)
        for words in (
            "Go to the Attempts pane",
            "Enter",
            "open the selected attempt",
            "diff the selected attempt",
            "submit the selected attempt",
        ):
            assert words in text
