"""`mlra attach` (issue 28): the full console on a run going on in another process.

A real headless run (`mlra run --no-tui` in a child process, its model the scripted
loopback server) holds on a command until the test lets it go; consoles attach to it
through its control socket, with Textual's pilot and in a real terminal (tmux), and the
run's own log says what they did.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Footer, Static, TextArea
from textual.widgets._footer import FooterKey

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.console.apps.attach_app import AttachApp
from mlra.console.cli.attach_cli import detached_line
from mlra.console.cli.cli import main as mlra_main
from mlra.console.panes.files import FilesPane
from mlra.console.panes.status import StatusBar
from mlra.console.screens.screens import BreakpointsScreen, ConfirmScreen, HelpScreen, PromptScreen
from mlra.console.text.attach_run import RemoteRun
from mlra.control_socket import socket_path
from tests.conftest import SECRET_ENV, answer_copy
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, plan, turn

HELD = "echo started-held && while [ -e .hold ]; do sleep 0.05; done && echo 42 > answer.txt"
"""The worker's command: it runs until the test removes `.hold` from the workspace."""


def _script() -> dict[str, Any]:
    return {
        "supervisor": [
            turn("I will plan first.", plan("Answer the question", "Submit")),
            turn("", call("assign_subtask", step_id="1", instructions="Answer, slowly.")),
            turn("The worker is done.", plan("Answer the question", "Submit", done=1)),
            turn("", call("submit", path="answer.txt", note="the answer")),
        ],
        "worker": [
            turn("Reading the question first.", call("read_file", path="question.txt")),
            turn("Now the slow part.", call("bash", command=HELD)),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }


def _footer_actions(app: Any) -> set[str]:
    """The actions the footer offers now."""
    return {str(key.action) for key in app.screen.query_one(Footer).query(FooterKey)}


def _watch_only_footer(app: Any) -> set[str] | None:
    """The footer's actions once it offers leaving and help but no steering key."""
    offered = _footer_actions(app)
    steering = {"pause", "resume", "step", "stop", "breakpoints"}
    if {"help", "quit"} <= offered and not steering & offered:
        return offered
    return None


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Poll `check` (another process's files or screen: nothing to await) until it gives
    something true, at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


async def pilot_wait(
    pilot: Pilot[Any], what: str, check: Callable[[], Any], timeout: float = 30.0
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def events_of(run_dir: Path) -> list[ev.Event]:
    try:
        return read_events(run_dir / "events.jsonl")
    except FileNotFoundError:
        return []


@dataclass
class LiveRun:
    run_dir: Path
    proc: subprocess.Popen[bytes]
    env: dict[str, str]

    @property
    def hold(self) -> Path:
        return self.run_dir / "workspace" / ".hold"

    def release(self) -> None:
        """Let the held command finish: the run goes on to its end."""
        self.hold.unlink(missing_ok=True)

    def finish(self) -> int:
        """Release the held command and wait for the run's end (its exit status)."""
        self.release()
        return self.proc.wait(timeout=60)

    def controls(self) -> list[ev.Control]:
        return [e for e in events_of(self.run_dir) if isinstance(e, ev.Control)]


def _held(run_dir: Path) -> bool:
    return any(
        isinstance(e, ev.ToolOutput) and "started-held" in e.text for e in events_of(run_dir)
    )


def _start_run(
    tmp_path: Path,
    answer_task: Path,
    *extra: str,
    script: dict[str, Any] | None = None,
    held: Callable[[Path], bool] | None = None,
) -> Iterator[LiveRun]:
    """A headless run in a child process, held on a command (or on its approval, with
    `--break bash`), its control socket up."""
    task = answer_copy(tmp_path / "task", files={"starter/.hold": ""}, source=answer_task)
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    env["OPENAI_API_KEY"] = "sk-test-not-a-secret"
    runs = tmp_path / "runs"
    run_dir = runs / "held"
    breaks = "--break" in extra
    with ScriptedModelServer(script or _script()) as server:
        args = [
            sys.executable, "-m", "mlra", "run", str(task), "--model", "openai/test",
            "--base-url", server.url_for("openai"), "--no-tui", "--runs-dir", str(runs),
            "--run-id", "held", *extra,
        ]  # fmt: skip
        proc = subprocess.Popen(
            args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        run = LiveRun(run_dir, proc, env)

        def ready() -> bool:
            if proc.poll() is not None:
                return True
            holds = held or (_waits if breaks else _held)
            return holds(run_dir) and socket_path(run_dir).exists()

        try:
            wait_for("the run to hold", ready, timeout=60)
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            yield run
        finally:
            if proc.poll() is None:  # a test that saw the end waited for it: none left
                proc.kill()
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()


def _waits(run_dir: Path) -> bool:
    return any(isinstance(e, ev.ApprovalRequested) for e in events_of(run_dir))


@pytest.fixture
def live_run(tmp_path: Path, answer_task: Path) -> Iterator[LiveRun]:
    yield from _start_run(tmp_path, answer_task)


@pytest.fixture
def held_at_break(tmp_path: Path, answer_task: Path) -> Iterator[LiveRun]:
    yield from _start_run(tmp_path, answer_task, "--break", "bash")


def _status_text(app: AttachApp) -> str:
    return str(app.query_one(StatusBar).render())


async def test_attached_consoles_show_the_run_steer_it_one_at_a_time_and_leave_it_going(
    live_run: LiveRun,
) -> None:
    """The first console shows the log so far and holds the controls: its Space pauses
    the run (recorded from "attach"); a second one only watches, and its keys are refused
    naming the holder; once the first detaches (the run going on), the second's key takes
    the controls; the run's end shows in it, and q leaves."""
    first = AttachApp(RemoteRun(live_run.run_dir, name="console one"))
    second = AttachApp(RemoteRun(live_run.run_dir, name="console two"))
    async with first.run_test(size=(160, 45)) as one:
        await pilot_wait(one, "the log so far", lambda: first.state.running)
        assert first.state.steps == 2 and first.state.plan  # the worker's steps, the plan
        files = first.query_one(FilesPane)
        await pilot_wait(one, "the workspace's files", lambda: "question.txt" in files._tree_nodes)
        assert "ATTACHED" in _status_text(first)
        await one.press("space")
        await pilot_wait(one, "the pause", lambda: first.state.paused)
        assert [(c.action, c.source) for c in live_run.controls()] == [("pause", "attach")]
        assert "PAUSED" in _status_text(first)

        async with second.run_test(size=(160, 45)) as two:
            await pilot_wait(two, "the pause, seen", lambda: second.state.paused)
            assert not second.remote.holding
            assert "WATCH-ONLY: console one holds the controls" in _status_text(second)
            await pilot_wait(
                two, "a footer without steering keys", lambda: _watch_only_footer(second)
            )
            await two.press("space")
            await pilot_wait(
                two,
                "the refusal",
                lambda: any(
                    "console one holds the controls" in str(n.message)
                    for n in second._notifications
                ),
            )
            assert second.state.paused  # refused: nothing was sent
            assert len(live_run.controls()) == 1

            await one.press("space")  # the holder resumes
            await pilot_wait(two, "the resume, seen", lambda: not second.state.paused)
            await one.press("q")  # detaches: the run goes on
            await pilot_wait(one, "the first console gone", lambda: not first.is_running)
            assert first.detached
            assert live_run.proc.poll() is None

            await two.press("space")  # the controls are free now: the key takes them
            await pilot_wait(two, "the second pause", lambda: second.state.paused)
            assert second.remote.holding
            assert "ATTACHED" in _status_text(second)
            await pilot_wait(two, "its keys offered", lambda: "step" in _footer_actions(second))
            await two.press("space")
            await pilot_wait(two, "the second resume", lambda: not second.state.paused)
            assert [(c.action, c.source) for c in live_run.controls()] == [
                ("pause", "attach"),
                ("resume", "attach"),
                ("pause", "attach"),
                ("resume", "attach"),
            ]

            live_run.release()
            # The end is shown first; the run's result (its last word) follows it.
            await pilot_wait(
                two,
                "the end shown and the result read",
                lambda: second.state.finished and second.result is not None,
                timeout=60,
            )
            assert second.result is not None and second.state.evaluation is not None
            assert "FINISHED" in _status_text(second)
            await two.press("q")
            await pilot_wait(two, "the second console gone", lambda: not second.is_running)
            assert not second.detached
    assert live_run.proc.wait(timeout=30) == 0


async def test_an_attached_console_approves_the_call_a_headless_run_holds(
    held_at_break: LiveRun,
) -> None:
    """A headless run held at a breakpoint (`--break bash`) is released by the attached
    console's a: the approval is the run's own event, from "attach", and the command runs;
    s, once confirmed, stops the run and it is graded, as from its own console."""
    app = AttachApp(RemoteRun(held_at_break.run_dir))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot_wait(pilot, "the waiting call", lambda: app.state.pending_approval)
        assert "WAITING FOR APPROVAL" in _status_text(app)
        await pilot.press("question_mark")  # help says what q does here
        help_ = await pilot_wait(
            pilot, "help", lambda: isinstance(app.screen, HelpScreen) and app.screen
        )
        assert ("q", "Detach") in [(k.key, k.label) for k in help_.keys]
        await pilot.press("escape")
        await pilot_wait(pilot, "the controls", lambda: app.remote.holding)
        # A rule naming no tool of the run's agents is refused in the dialog, which stays,
        # from the tools the run's status named, as the run's own console refuses it.
        await pilot.press("b")
        rules = await pilot_wait(
            pilot, "the dialog", lambda: isinstance(app.screen, BreakpointsScreen) and app.screen
        )
        rules.query_one(TextArea).text = "bsah"
        await pilot.press("ctrl+s")
        said = rules.query_one("#break-error", Static)
        await pilot_wait(pilot, "the refusal", lambda: "did you mean bash?" in str(said.render()))
        await pilot.press("escape")
        await pilot_wait(pilot, "the dialog gone", lambda: app.screen is not rules)
        await pilot.press("a")
        await pilot_wait(pilot, "the approval", lambda: app.state.pending_approval is None)
        approved = [c for c in held_at_break.controls() if c.action == "approve"]
        assert [(c.source, c.call_id) for c in approved] == [("attach", approved[0].call_id)]
        await pilot_wait(pilot, "the command running", lambda: _held(held_at_break.run_dir))
        await pilot.press("s")  # stop and evaluate: asked first, as in the run's own console
        await pilot_wait(pilot, "the question", lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await pilot_wait(pilot, "the end shown", lambda: app.state.finished, timeout=60)
        assert app.state.finished is not None and app.state.finished.reason == "stopped"
        assert app.state.evaluation is not None  # graded
        stops = [c for c in held_at_break.controls() if c.action == "stop"]
        assert [c.source for c in stops] == ["attach"]
        await pilot.press("q")  # the run has ended: q leaves, nothing is asked
        await pilot_wait(pilot, "the console gone", lambda: not app.is_running)
        assert not app.detached
    held_at_break.proc.wait(timeout=30)  # 1: stopped before any answer, its score none
    assert isinstance(events_of(held_at_break.run_dir)[-1], ev.RunFinished)


class OlderRun(RemoteRun):
    """A run as an older mlra serves it: its status names no tools (`RunStatus.tools`
    came later); all else is the real run's."""

    def _take_status(self, status: Any) -> None:
        super()._take_status(status.model_copy(update={"tools": {}}))


async def test_an_attached_console_knows_an_older_runs_tools_from_its_log(
    held_at_break: LiveRun,
) -> None:
    """A run whose status names no tools: the breakpoints dialog still refuses a rule
    naming none of its agents' tools, from the tools its recorded config gives them (and
    those its agents called), and takes one naming a tool its agents have."""
    app = AttachApp(OlderRun(held_at_break.run_dir))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot_wait(pilot, "the waiting call", lambda: app.state.pending_approval)
        await pilot_wait(pilot, "the controls", lambda: app.remote.holding)
        assert app.remote.controls.tools == {}  # nothing from the status
        await pilot.press("b")
        rules = await pilot_wait(
            pilot, "the dialog", lambda: isinstance(app.screen, BreakpointsScreen) and app.screen
        )
        rules.query_one(TextArea).text = "bsah"
        await pilot.press("ctrl+s")
        said = rules.query_one("#break-error", Static)
        await pilot_wait(pilot, "the refusal", lambda: "did you mean bash?" in str(said.render()))
        assert "the worker's tools: " in str(said.render())
        rules.query_one(TextArea).text = "write_file"  # no agent called it yet: its config's
        await pilot.press("ctrl+s")
        await pilot_wait(pilot, "the dialog gone", lambda: app.screen is not rules)
        await pilot_wait(
            pilot,
            "the run's rules",
            lambda: any(c.action == "breakpoints" for c in held_at_break.controls()),
        )
        await pilot.press("q")  # detached from a run a breakpoint holds: it says so
        await pilot_wait(pilot, "the console gone", lambda: not app.is_running)
    left = detached_line(held_at_break.run_dir, app.remote.state)
    assert left.startswith("detached; the run waits for approval of its bash call · "), left
    assert left.endswith(f"mlra ctl {held_at_break.run_dir} approve runs it")


async def test_n_in_an_attached_console_says_what_the_runs_step_did(live_run: LiveRun) -> None:
    """`n` while the held command runs: the run's answer is the toast (it guessed from
    the run's state, and said a pause was coming again where the second did nothing)."""
    app = AttachApp(RemoteRun(live_run.run_dir))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot_wait(pilot, "the controls", lambda: app.remote.holding)

        def toasts() -> list[str]:
            return [str(n.message) for n in app._notifications]

        await pilot.press("n")
        await pilot_wait(pilot, "the step's answer", lambda: len(toasts()) == 1)
        await pilot.press("n")
        await pilot_wait(pilot, "the second's", lambda: len(toasts()) == 2)
        assert toasts() == [
            "the action in hand finishes, then paused",
            "already pausing after the action in hand: nothing more recorded",
        ]
        assert [(c.action, c.source) for c in live_run.controls()] == [("step", "attach")]


async def test_a_console_leaving_a_paused_run_says_it_stays_paused(live_run: LiveRun) -> None:
    """ "the run goes on" was untrue of a run left paused: it waits for a resume."""
    app = AttachApp(RemoteRun(live_run.run_dir))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot_wait(pilot, "the controls", lambda: app.remote.holding)
        await pilot.press("space")
        await pilot_wait(pilot, "the pause", lambda: app.state.paused)
        await pilot.press("q")
        await pilot_wait(pilot, "the console gone", lambda: not app.is_running)
    assert app.detached
    left = detached_line(live_run.run_dir, app.remote.state)
    assert left.startswith("detached; the run stays paused · "), left
    assert [c.action for c in live_run.controls()] == ["pause"]  # and so it is


def test_attach_refuses_in_one_line_what_is_not_a_live_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    ended = runs / "ended"
    ended.mkdir(parents=True)
    (ended / "events.jsonl").write_text("")
    (ended / "result.json").write_text("{}")
    killed = runs / "killed"
    killed.mkdir()
    (killed / "events.jsonl").write_text("")
    cases = {
        "nothing": "no run 'nothing': not a run folder (no events.jsonl), nor a run id",
        "ended": "ended has ended: mlra replay ",
        str(killed): "is not running (stopped without an end): mlra resume",
    }
    for run, said in cases.items():
        assert mlra_main(["attach", run, "--runs-dir", str(runs)]) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err
        if run == "ended":  # the folder as replay takes it, relative where that is shorter
            named = err.split("mlra replay ", 1)[1].split(" steps through it")[0]
            assert Path(named).resolve() == ended.resolve(), err


def _toasts(screen: str) -> str:
    """The words of the toasts on a captured screen (each line of one starts with its
    bar, and the pane behind shows on its right), wrapped lines joined."""
    lines = [line for line in screen.splitlines() if line[:1] == "▌"]
    shown = [line[1:].split("│")[0].split("╰")[0] for line in lines]
    return " ".join(" ".join(shown).split())


def _tmux(socket: str, *args: str) -> str:
    done = subprocess.run(
        ["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=10, check=False
    )
    return done.stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_mlra_attach_in_a_real_terminal_detaches_and_the_run_goes_on(live_run: LiveRun) -> None:
    """What a person sees in two terminals: the run's panes and each console's word in the
    status line; Space in the first pauses the run; the second only watches, and its Space
    is answered with who holds the controls; q detaches the first, says so, and the run
    goes on to its end, which the second shows."""
    socket = f"mlra-attach-test-{os.getpid()}"
    command = f"{sys.executable} -m mlra attach {live_run.run_dir}; echo attach-exit=$?; sleep 60"
    env = ["env", "TERM=xterm-256color", "COLORTERM=", "MLRA_MODEL="]
    size = ["-x", "120", "-y", "40"]
    _tmux(socket, "new-session", "-d", *size, "-s", "a", *env, "sh", "-c", command)
    try:

        def screen(target: str) -> str:
            return _tmux(socket, "capture-pane", "-p", "-t", target)

        # The header says STARTING until the run's own state reaches the console, which
        # may come after the transcript's first line: wait for what the person waits for.
        shown = wait_for(
            "the console",
            lambda: (
                (s := screen("a"))
                and all(w in s for w in ("ATTACHED", "started-held", "RUNNING"))
                and s
            ),
        )
        assert "Answer the question" in shown
        assert "q Detach" in shown
        _tmux(socket, "send-keys", "-t", "a", "Space")
        wait_for("the pause", lambda: "PAUSED" in screen("a"))
        assert [(c.action, c.source) for c in live_run.controls()] == [("pause", "attach")]

        _tmux(socket, "new-session", "-d", *size, "-s", "b", *env, "sh", "-c", command)
        wait_for("the second console", lambda: "PAUSED" in screen("b"))
        assert "WATCH-ONLY" in screen("b")
        _tmux(socket, "send-keys", "-t", "b", "Space")
        refused = wait_for(
            "the refusal",
            lambda: "holds the controls" in _toasts(screen("b")) and _toasts(screen("b")),
        )
        assert "watching: mlra attach on /dev/pts/" in refused  # the holder, by its terminal
        assert len(live_run.controls()) == 1

        _tmux(socket, "send-keys", "-t", "a", "Space")
        wait_for(
            "the resume", lambda: [c.action for c in live_run.controls()] == ["pause", "resume"]
        )
        _tmux(socket, "send-keys", "-t", "a", "q")
        left = wait_for("the shell again", lambda: "attach-exit=" in screen("a") and screen("a"))
        assert "detached; the run goes on" in left and "attach-exit=0" in left
        assert live_run.proc.poll() is None
        live_run.release()
        wait_for("the end, in the second", lambda: "FINISHED" in screen("b"), timeout=60)
        _tmux(socket, "send-keys", "-t", "b", "q")
        wait_for("the second leaves", lambda: "attach-exit=0" in screen("b"))
        assert "score" in screen("b")  # the run's final line, as a headless run prints it
    finally:
        _tmux(socket, "kill-server")
    assert live_run.proc.wait(timeout=30) == 0
    assert isinstance(events_of(live_run.run_dir)[-1], ev.RunFinished)


async def test_a_run_in_its_own_console_is_only_watched_from_an_attached_one(
    tmp_path: Path, answer_task: Path
) -> None:
    """A run driven by a console in its own process holds its controls from the start: an
    attached console watches, says who steers, and its keys are refused naming them,
    while the run's own console steers as ever (its pause reaches the attached one)."""
    from mlra.agent.agents.run import agent_for
    from mlra.agent.providers import resolve_model
    from mlra.agent.run.controller import RunController
    from mlra.agent.setup.config import RunConfig
    from mlra.console.apps.app import console_app
    from mlra.tasks.spec import load_task

    task = answer_copy(tmp_path / "task", files={"starter/.hold": ""}, source=answer_task)
    with ScriptedModelServer(_script()) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer", model="openai/test", runs_dir=tmp_path / "runs", isolation="none"
        )
        controller = RunController(config, load_task(task), provider)
        controller.prepare()
        own = console_app(controller, agent_for, [])
        async with own.run_test(size=(160, 45)) as here:
            await pilot_wait(here, "the held command", lambda: _held(controller.run_dir))
            attached = AttachApp(RemoteRun(controller.run_dir))
            async with attached.run_test(size=(160, 45)) as there:
                await pilot_wait(there, "the log so far", lambda: attached.state.running)
                assert not attached.remote.holding
                status = _status_text(attached)
                assert "WATCH-ONLY: the run's own console holds the controls" in status
                # Only what works is offered: no steering key in the footer, the help or
                # the palette (before, all of them were, and each was then refused).
                # The footer redraws its keys a refresh after the holder is known: wait for
                # it to offer only what works (a timeout here is the failure).
                offered = await pilot_wait(
                    there, "a footer without steering keys", lambda: _watch_only_footer(attached)
                )
                assert not [a for a in offered if a.startswith("inject")], offered
                await pilot_wait(
                    here, "its own keys", lambda: {"pause", "step", "stop"} <= _footer_actions(own)
                )
                await there.press("question_mark")
                help_ = await pilot_wait(
                    there,
                    "help",
                    lambda: isinstance(attached.screen, HelpScreen) and attached.screen,
                )
                listed = {k.action.split("(")[0] for k in help_.keys}
                assert "quit" in listed and not {"pause", "step", "approve", "inject"} & listed
                await there.press("escape")
                await pilot_wait(
                    there, "help closed", lambda: not isinstance(attached.screen, HelpScreen)
                )
                await there.press("space")
                await pilot_wait(
                    there,
                    "the refusal",
                    lambda: any(
                        "the run's own console holds the controls" in str(n.message)
                        for n in attached._notifications
                    ),
                )
                await here.press("space")  # the run's own console pauses it
                await pilot_wait(there, "its pause, seen", lambda: attached.state.paused)
                controls = [e for e in events_of(controller.run_dir) if isinstance(e, ev.Control)]
                assert [(c.action, c.source) for c in controls] == [("pause", "user")]
                await there.press("q")
                await pilot_wait(there, "detached", lambda: not attached.is_running)
            controller.request_stop(evaluate=False)
            await pilot_wait(here, "the run's end", lambda: own.result is not None, timeout=60)


async def test_a_watcher_the_run_dropped_for_falling_behind_watches_again_from_where_it_was(
    tmp_path: Path,
) -> None:
    """The run drops a watcher that falls too far behind, saying from where to watch
    again; the attached console does so, and sees every event once, in order."""
    import asyncio
    import json as json_

    from mlra.agent.record.eventlog import encode_event
    from mlra.control_socket import CtlReply, CtlRequest, RunStatus, encode, short_address

    def stored(event: ev.Event, seq: int) -> dict[str, Any]:
        event.seq, event.t = seq, float(seq)
        return json_.loads(encode_event(event))

    log = [
        stored(ev.Notice(message="one"), 1),
        stored(ev.Notice(message="two"), 2),
        stored(ev.Notice(message="three"), 3),
        stored(ev.RunFinished(status="stopped", reason="stopped"), 4),
    ]
    watches: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            req = CtlRequest.model_validate_json(line)
            if req.op == "status":
                status = RunStatus(run_id="r", task="t", pid=1, state="running")
                writer.write(encode(CtlReply(ok=True, status=status)))
            elif req.op == "hold":
                writer.write(encode(CtlReply(ok=True, message="held")))
            elif req.op == "watch":
                watches.append(req.from_seq)
                if len(watches) == 1:  # two events, then dropped
                    for data in log[:2]:
                        writer.write(encode(CtlReply(ok=True, event=data)))
                    writer.write(encode(CtlReply(ok=False, message="dropped: watch again")))
                else:  # one sent twice, then the rest and the end
                    for data in log[1:]:
                        writer.write(encode(CtlReply(ok=True, event=data)))
                    writer.write(encode(CtlReply(ok=True, ended=True, message="ended")))
            await writer.drain()
        writer.close()

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with short_address(run_dir) as address:  # however deep pytest's folder is
        server = await asyncio.start_unix_server(serve, path=address)
    seen: list[int] = []
    try:
        remote = RemoteRun(run_dir)
        remote.subscribe(lambda event: seen.append(event.seq))
        result = await asyncio.wait_for(remote.follow(), timeout=10)
    finally:
        server.close()
    assert watches == [0, 2]
    assert seen == [1, 2, 3, 4]
    assert result is not None and result.status == "stopped"
    assert remote.gone is None


def _attempt_held(run_dir: Path) -> bool:
    return _held(run_dir / "attempts" / "a1")


@pytest.fixture
def searching_run(tmp_path: Path, answer_task: Path) -> Iterator[LiveRun]:
    """A headless search (`--search llm`) whose one attempt holds on a command."""
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Answer, slowly")),
            turn("", call("attempt_wait", attempt="a1")),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command=HELD)),
            turn("", call("report", summary="wrote 42")),
        ],
    }
    extra = ("--search", "llm", "--attempts", "1")
    yield from _start_run(tmp_path, answer_task, *extra, script=script, held=_attempt_held)


async def test_an_attached_console_messages_a_running_attempt(searching_run: LiveRun) -> None:
    """In a search, the Attempts pane's m sends a message to the selected running
    attempt's worker from the attached console too: the attempt's own log records it,
    from "attach"."""
    app = AttachApp(RemoteRun(searching_run.run_dir))
    attempt = searching_run.run_dir / "attempts" / "a1"
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot_wait(pilot, "the attempt", lambda: "a1" in app.state.attempts.nodes)
        await pilot_wait(pilot, "the controls", lambda: app.remote.holding)
        await pilot.press("A")  # to the Attempts pane; a1 is selected
        await pilot.press("m")
        await pilot_wait(pilot, "the prompt", lambda: isinstance(app.screen, PromptScreen))
        await pilot.press(*"look again")
        await pilot.press("enter")
        told = wait_for(
            "the message in the attempt's log",
            lambda: [
                e for e in events_of(attempt) if isinstance(e, ev.Control) and e.action == "inject"
            ],
            timeout=10,
        )
        assert [(c.source, c.text, c.target) for c in told] == [("attach", "look again", "worker")]
        await pilot.press("q")
        await pilot_wait(pilot, "the console gone", lambda: not app.is_running)
    (attempt / "workspace" / ".hold").unlink()  # the attempt's own workspace
    assert searching_run.finish() == 0


async def test_the_files_pane_of_an_attached_console_reads_nothing_outside_the_workspace(
    tmp_path: Path,
) -> None:
    """The workspace is read on the host, where the attached console runs as its user: a
    link the agent left there is listed as a link, and reading through it is refused."""
    from mlra.console.text.host_workspace import HostWorkspace

    secret = tmp_path / "secret.txt"
    secret.write_text("not for the agent")
    workspace = tmp_path / "workspace"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "sub" / "notes.txt").write_text("hello")
    (workspace / "leak").symlink_to(secret)
    (workspace / "sub" / "up").symlink_to("../../secret.txt")
    files = HostWorkspace(workspace)
    listed = {info.path: info for info in await files.list_tree(".", max_depth=3)}
    assert set(listed) == {"sub", "sub/notes.txt", "sub/up", "leak"}
    assert await files.read_file("sub/notes.txt") == b"hello"
    for path in ("leak", "sub/up", "../secret.txt"):
        with pytest.raises(PermissionError):
            await files.read_file(path)


async def test_a_run_killed_while_attached_is_said_gone_and_q_leaves(live_run: LiveRun) -> None:
    """The run's process killed (no end in its log): the attached console says the run no
    longer answers and how to go on with it, offers no steering, and q leaves."""
    app = AttachApp(RemoteRun(live_run.run_dir))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot_wait(pilot, "the log so far", lambda: app.state.running)
        live_run.proc.kill()
        await pilot_wait(pilot, "the run gone", lambda: app.remote.gone is not None)
        # The status line and the notice are two steps: both are waited for.
        await pilot_wait(
            pilot,
            "it said",
            lambda: (
                "GONE" in _status_text(app)
                and any("no longer answers" in str(n.message) for n in app._notifications)
            ),
        )
        told = " ".join(str(n.message) for n in app._notifications)
        assert "The run no longer answers" in told and "mlra resume RUN" in told
        assert app.check_action("pause", ()) is False
        await pilot.press("q")
        await pilot_wait(pilot, "the console gone", lambda: not app.is_running)
    assert not app.detached and app.exit_code() == 1  # no result: not a finished run
