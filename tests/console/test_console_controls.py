"""Every console control, driven with Textual's Pilot against a live run whose
model is the scripted server on loopback (through the real OpenAI SDK)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual import events
from textual.pilot import Pilot
from textual.widgets import Input, Static, TextArea

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.record.run_result import RunResult
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.apps.app import MlraApp
from mlra.console.apps.headless_run import final_line
from mlra.console.panes.status import StatusBar
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.panes.transcript_entries import ToolEntry
from mlra.console.screens.screens import ConfirmScreen, EditArgsScreen, HelpScreen, PromptScreen
from mlra.console.text.args import shown_folder
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

SLOW_COUNT = (
    "import time\nfor i in range(60):\n    print('tick', i, flush=True)\n    time.sleep(0.05)\n"
)
UNTIL_STOPPED = (
    "import time\nfor i in range(2400):\n    print('tick', i, flush=True)\n    time.sleep(0.05)\n"
)


class Watch:
    """Awaitable views of a live run's events (no sleeping until something shows up)."""

    def __init__(self, controller: RunController) -> None:
        self.events: list[ev.Event] = []
        self._waiters: list[tuple[Callable[[ev.Event], bool], int, asyncio.Future[ev.Event]]] = []
        controller.subscribe(self._on)

    def _on(self, event: ev.Event) -> None:
        self.events.append(event)
        for predicate, after, future in list(self._waiters):
            if not future.done() and event.seq > after and predicate(event):
                future.set_result(event)

    async def wait(
        self, predicate: Callable[[ev.Event], bool], *, after: int = 0, timeout: float = 30
    ) -> ev.Event:
        for event in self.events:
            if event.seq > after and predicate(event):
                return event
        future: asyncio.Future[ev.Event] = asyncio.get_running_loop().create_future()
        self._waiters.append((predicate, after, future))
        return await asyncio.wait_for(future, timeout)

    def count(self, predicate: Callable[[ev.Event], bool]) -> int:
        return sum(1 for e in self.events if predicate(e))


def is_(kind: type, **fields: Any) -> Callable[[ev.Event], bool]:
    return lambda e: isinstance(e, kind) and all(getattr(e, k) == v for k, v in fields.items())


@dataclass
class Live:
    app: MlraApp
    pilot: Pilot[int]
    watch: Watch
    server: ScriptedModelServer
    controller: RunController

    async def shown(self, predicate: Callable[[MlraApp], bool], timeout: float = 10) -> None:
        """Wait until the app's screen reflects something (it renders in batches)."""
        deadline = time.monotonic() + timeout
        while not predicate(self.app):
            assert time.monotonic() < deadline, "the console never showed it"
            await self.pilot.pause(0.02)

    async def finished(self) -> ev.RunFinished:
        return await self.watch.wait(is_(ev.RunFinished), timeout=60)  # type: ignore[return-value]


@asynccontextmanager
async def live(
    tmp_path: Path, answer_task: Path, script: dict[str, Any], **config: Any
) -> AsyncIterator[Live]:
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        cfg = RunConfig(
            task="answer",
            model="openai/test",
            runs_dir=tmp_path,
            isolation="none",
            on_provider_failure="pause",
            **config,
        )
        controller = RunController(cfg, load_task(answer_task), provider)
        controller.prepare()
        watch = Watch(controller)
        app = MlraApp(controller=controller, make_agent=agent_for)
        async with app.run_test(size=(160, 48)) as pilot:
            yield Live(app, pilot, watch, server, controller)
            # A run that finished is let end whole before the app closes: its sandbox's
            # close carries the workspace back off its volume after `run_finished`, and
            # a test reading the workspace once the app had closed (cancelling the run
            # mid-close) found answer.txt missing beside a busy neighbour.
            if any(isinstance(e, ev.RunFinished) for e in watch.events):
                async with asyncio.timeout(120):
                    while app.result is None:
                        await pilot.pause(0.02)


def terminal_key(app: MlraApp, key: str, char: str | None) -> None:
    event = events.Key(key, char)
    event.set_sender(app)
    assert app._driver is not None
    app._driver.send_message(event)


def worker(*turns: dict[str, Any]) -> dict[str, Any]:
    return {"supervisor": supervisor_answering(), "worker": list(turns)}


ANSWER = turn("", call("bash", command="echo 42 > answer.txt"))
REPORT = turn("", call("report", summary="done"))


async def test_pause_suspends_the_command_and_stops_the_clock_then_resume(
    tmp_path: Path, answer_task: Path
) -> None:
    script = worker(turn("count", call("python", code=SLOW_COUNT)), ANSWER, REPORT)
    async with live(tmp_path, answer_task, script) as run:
        await run.watch.wait(is_(ev.ToolOutput))
        await run.pilot.press("space")
        await run.watch.wait(is_(ev.Control, action="pause"))
        await run.shown(lambda app: app.state.phase == "paused")
        clock, chunks = run.controller.clock.elapsed(), run.watch.count(is_(ev.ToolOutput))
        await asyncio.sleep(0.4)  # long enough for 8 ticks, were the command not suspended
        assert run.controller.clock.elapsed() == clock
        assert run.watch.count(is_(ev.ToolOutput)) == chunks
        await run.pilot.press("space")
        await run.watch.wait(is_(ev.Control, action="resume"))
        finished = await run.finished()
    assert finished.reason == "submitted"
    result = next(
        e for e in run.watch.events if isinstance(e, ev.ToolResult) and e.tool == "python"
    )
    assert result.ok and "tick 59" in result.output


async def test_step_runs_exactly_one_action_then_pauses(tmp_path: Path, answer_task: Path) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), start_paused=True) as run:
        await run.watch.wait(is_(ev.Control, action="pause", source="start"))
        await run.shown(lambda app: app.state.phase == "paused")
        assert run.watch.count(is_(ev.StepStarted)) == 0
        for expected in (1, 2):
            mark = run.watch.events[-1].seq
            await run.pilot.press("n")
            await run.watch.wait(is_(ev.Control, action="pause", source="step"), after=mark)
            assert run.watch.count(is_(ev.StepStarted)) == expected
            assert len(run.server.requests) == expected
        # The first action was the supervisor's plan; the second assigned the subtask.
        assert run.controller.state.plan[0].title == "Answer the question"
        await run.pilot.press("space")
        assert (await run.finished()).reason == "submitted"


async def test_approve_a_call_at_a_breakpoint(tmp_path: Path, answer_task: Path) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        await run.shown(lambda app: app.state.phase == "awaiting_approval")
        await run.pilot.press("a")
        result = await run.watch.wait(
            lambda e: isinstance(e, ev.ToolResult) and e.call_id == waiting.call_id
        )  # type: ignore[attr-defined]
        assert result.ok  # type: ignore[attr-defined]
        assert (await run.finished()).reason == "submitted"
    assert (
        run.controller.state.evaluation is not None and run.controller.state.evaluation.score == 1.0
    )


async def test_edit_a_call_before_it_runs(tmp_path: Path, answer_task: Path) -> None:
    async with live(
        tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash:answer.txt"]
    ) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        await run.shown(lambda app: app.state.pending_approval is not None)
        await run.pilot.press("e")
        await run.shown(lambda app: isinstance(app.screen, EditArgsScreen))
        run.app.screen.query_one(TextArea).text = json.dumps({"command": "echo 41 > answer.txt"})
        await run.pilot.press("ctrl+s")
        await run.watch.wait(
            lambda e: isinstance(e, ev.ToolResult) and e.call_id == waiting.call_id
        )  # type: ignore[attr-defined]
        await run.finished()
    edit = next(e for e in run.watch.events if isinstance(e, ev.Control) and e.action == "edit")
    assert edit.arguments == {"command": "echo 41 > answer.txt"}
    assert (run.controller.workspace / "answer.txt").read_text().strip() == "41"
    assert (
        run.controller.state.evaluation is not None and run.controller.state.evaluation.score == 0.0
    )


def _shown_entry(pane: TranscriptPane, call_id: str) -> str:
    entry = pane.tool_entry(call_id)
    return "" if entry is None else entry.render_entry().plain


async def test_reject_a_call_with_a_message_the_worker_reads(
    tmp_path: Path, answer_task: Path
) -> None:
    script = worker(turn("", call("bash", command="rm -rf /tmp/nothing")), ANSWER, REPORT)
    async with live(tmp_path, answer_task, script, breakpoints=["bash:rm -rf"]) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        await run.shown(lambda app: app.state.pending_approval is not None)
        await run.pilot.press("r")
        await run.shown(
            lambda app: isinstance(app.screen, PromptScreen) and isinstance(app.focused, Input)
        )
        await run.pilot.press(*"keep it", "enter")
        result = await run.watch.wait(
            lambda e: isinstance(e, ev.ToolResult) and e.call_id == waiting.call_id
        )  # type: ignore[attr-defined]
        # Under the call it said "rejectd by you" (the action's name with a "d").
        pane = run.app.query_one(TranscriptPane)
        await run.shown(
            lambda app: "rejected by you" in _shown_entry(pane, waiting.call_id)  # type: ignore[attr-defined]
        )
        await run.finished()
    assert not result.ok and "The user rejected this call: keep it" in result.output  # type: ignore[attr-defined]
    sent = json.dumps(run.server.requests_for("worker")[1].body)
    assert "The user rejected this call: keep it" in sent


async def test_inject_a_message_to_the_worker(tmp_path: Path, answer_task: Path) -> None:
    # The command runs until the test has typed its message, however slow the machine.
    wait_for_go = (
        "import os, time\nprint('waiting', flush=True)\n"
        "for _ in range(1200):\n    if os.path.exists('go'): break\n    time.sleep(0.05)\n"
    )
    script = worker(turn("wait", call("python", code=wait_for_go)), ANSWER, REPORT)
    async with live(tmp_path, answer_task, script) as run:
        await run.watch.wait(is_(ev.ToolOutput))
        await run.pilot.press("i")
        await run.shown(
            lambda app: isinstance(app.screen, PromptScreen) and isinstance(app.focused, Input)
        )
        await run.pilot.press(*"use seed 7", "enter")
        injected = await run.watch.wait(is_(ev.Control, action="inject"))
        (run.controller.workspace / "go").touch()
        step = await run.watch.wait(is_(ev.StepStarted, agent="worker"), after=injected.seq)
        await run.finished()
    assert injected.target == "worker" and injected.text == "use seed 7"  # type: ignore[attr-defined]
    assert "[message from the user] use seed 7" in step.prompt  # type: ignore[attr-defined]


async def test_stop_and_evaluate_now(tmp_path: Path, answer_task: Path) -> None:
    # The command runs until the run is stopped, however slow the machine.
    script = worker(ANSWER, turn("count", call("python", code=UNTIL_STOPPED)), REPORT)
    async with live(tmp_path, answer_task, script) as run:
        await run.watch.wait(is_(ev.ToolOutput))
        # Started with isolation "none": the status bar says so from the start.
        await run.shown(lambda app: " UNISOLATED " in str(app.query_one(StatusBar).content))
        await run.pilot.press("s")
        await run.shown(lambda app: isinstance(app.screen, ConfirmScreen))
        await run.pilot.press("y")
        finished = await run.finished()
        await run.shown(lambda app: app.state.phase == "finished")
    assert finished.status == "finished" and finished.reason == "stopped"
    assert (
        run.controller.state.evaluation is not None and run.controller.state.evaluation.score == 1.0
    )


async def test_a_stray_enter_does_not_confirm_a_stop(tmp_path: Path, answer_task: Path) -> None:
    """Enter in a question whose Yes ends the run answers No: a supervisor who pressed `s`
    or `q` by mistake (typing a message after a key that opened no prompt, say) and then
    Enter keeps the run. The No button is the one focused, and said to be the default."""
    script = worker(ANSWER, turn("count", call("python", code=UNTIL_STOPPED)), REPORT)
    async with live(tmp_path, answer_task, script) as run:
        await run.watch.wait(is_(ev.ToolOutput))
        for key in ("s", "q"):
            await run.pilot.press(key)
            await run.shown(lambda app: isinstance(app.screen, ConfirmScreen))
            await run.pilot.press("enter")
            await run.shown(lambda app: not isinstance(app.screen, ConfirmScreen))
        assert run.controller.state.finished is None
        assert not any(isinstance(e, ev.Control) and e.action == "stop" for e in run.watch.events)
        await run.pilot.press("s")
        await run.shown(lambda app: isinstance(app.screen, ConfirmScreen))
        await run.pilot.press("y")
        finished = await run.finished()
    assert finished.reason == "stopped"


async def test_quit_asks_first_then_marks_the_run_stopped(
    tmp_path: Path, answer_task: Path
) -> None:
    # The command goes on until the run is stopped (two minutes at most), so the run is
    # still going when the second "q" is answered, however slow the machine.
    script = worker(turn("count", call("python", code=UNTIL_STOPPED)), ANSWER, REPORT)
    async with live(tmp_path, answer_task, script) as run:
        await run.watch.wait(is_(ev.ToolOutput))
        await run.pilot.press("q")
        await run.shown(lambda app: isinstance(app.screen, ConfirmScreen))
        await run.pilot.press("n")  # changed my mind: nothing happens
        await run.shown(lambda app: not isinstance(app.screen, ConfirmScreen))
        assert run.controller.state.finished is None
        await run.pilot.press("q")
        await run.shown(lambda app: isinstance(app.screen, ConfirmScreen))
        asked = " ".join(str(s.render()) for s in run.app.screen.query(Static))
        assert "mlra resume goes on with it later" in asked
        await run.pilot.press("y")
        finished = await run.finished()
        await run.shown(lambda app: app.return_value is not None)
    assert finished.status == "stopped"
    assert not any(isinstance(e, ev.EvaluationStarted) for e in run.watch.events)
    result = json.loads((run.controller.run_dir / "result.json").read_text())
    assert result["status"] == "stopped"
    assert run.app.return_value == 1  # what `mlra run` exits with
    # The line `mlra run` prints last, after the console: how to go on.
    last = final_line(run.controller.run_dir, RunResult.model_validate(result))
    shown = shown_folder(run.controller.run_dir)
    assert last.endswith(f"run dir {shown} · mlra resume {shown} goes on with it"), last


def test_the_last_line_names_the_run_folder_as_short_as_it_can(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A runs folder outside the one `mlra run` ran in was named from it: `run dir
    ../../tmp/tmuxcheck/runs/2026...` from a clone in /work/mlra, longer than the path
    itself and to be worked out before `mlra resume` took it."""
    here, runs = tmp_path / "work" / "repo", Path("/tmp/elsewhere/runs")
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    counts = dict.fromkeys(
        ("duration_s", "wall_s", "steps", "tool_calls", "input_tokens", "output_tokens",
         "cache_read_tokens", "tokens", "cost_usd"),
        0,
    )  # fmt: skip
    stopped = RunResult(
        run_id="r1", task="answer", model="demo", status="stopped", reason="stopped", **counts
    )
    last = final_line(runs / "r1", stopped)
    assert last.endswith(f"run dir {runs / 'r1'} · mlra resume {runs / 'r1'} goes on with it")
    assert final_line(here / "runs" / "r1", stopped).endswith(
        "run dir runs/r1 · mlra resume runs/r1 goes on with it"
    )


async def test_quit_as_the_run_closes_leaves_once_its_result_is_written(
    tmp_path: Path, answer_task: Path
) -> None:
    """A run that has ended still closes: it delivers the end's notification, carries its
    workspace back and writes result.json. `q` then leaves once that is done, never
    half-way. Here a real `--notify` command holds the close until the test lets it go."""
    gate = tmp_path / "gate"
    hold = f"cmd:cat > /dev/null; while [ ! -e {gate} ]; do sleep 0.05; done"
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), notify=[hold]) as run:
        await run.finished()
        await run.shown(lambda app: app.state.finished is not None)
        assert run.app.result is None  # still closing: the notification is held
        await run.pilot.press("q")
        await run.pilot.pause(0.2)
        assert run.app.is_running and not isinstance(run.app.screen, ConfirmScreen)
        assert not (run.controller.run_dir / "result.json").exists()
        gate.touch()
        await run.shown(lambda app: app.return_value is not None)
    assert run.app.result is not None
    assert json.loads((run.controller.run_dir / "result.json").read_text())["status"] == "finished"


async def test_keys_answer_while_a_command_floods_its_output(
    tmp_path: Path, answer_task: Path
) -> None:
    # The flood lasts until the test has tried its keys (a file in the workspace says
    # so, after at least 5,000 lines), so "the keys were answered while it printed"
    # holds however slow the machine: no clock ends it (at load 15 five rounds of keys
    # outlasted a two-minute one). Should the test die first, the run's end kills it.
    # How fast they are answered is a target bench/console_load.py measures (100 ms);
    # here a key's answer may take as long as a starved process needs.
    flood = (
        "import os, sys, time\n"
        "i = 0\n"
        "while i < 5000 or not os.path.exists('stop-flood'):\n"
        "    sys.stdout.write(''.join(f'line {i + k}\\n' for k in range(200)))\n"
        "    sys.stdout.flush()\n"
        "    i += 200\n"
        "    time.sleep(0.02)\n"
    )
    script = worker(turn("flood", call("python", code=flood)), ANSWER, REPORT)
    async with live(tmp_path, answer_task, script) as run:
        call_event = await run.watch.wait(is_(ev.ToolOutput))
        for _ in range(5):
            # Keys go in as the terminal driver delivers them: Pilot.press would also
            # wait for the app to go idle, which a flooded app never quite does.
            terminal_key(run.app, "question_mark", "?")
            await run.shown(lambda app: isinstance(app.screen, HelpScreen), timeout=120)
            terminal_key(run.app, "escape", None)
            await run.shown(lambda app: not isinstance(app.screen, HelpScreen), timeout=120)
        still_running = not any(
            isinstance(e, ev.ToolResult) and e.call_id == call_event.call_id
            for e in run.watch.events  # type: ignore[attr-defined]
        )
        (run.controller.workspace / "stop-flood").touch()
        await run.watch.wait(is_(ev.ToolResult, call_id=call_event.call_id), timeout=120)
        entry = run.app.query_one("#transcript").tool_entry(call_event.call_id)  # type: ignore[attr-defined]
        await run.finished()
    assert still_running, "the flood ended before the keys were answered"
    assert entry is not None and len(entry.output.tail) <= 400  # bounded, however much was printed
    # The result, what the model read (the output's head and tail), replaced the stream.
    assert entry.result is not None and entry.result.truncated
    assert entry.output.tail[-1] == entry.result.output.rstrip().splitlines()[-2]


async def test_a_failing_provider_pauses_the_run_until_the_user_resumes(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": [
            supervisor_answering()[0],
            {"status": 500, "times": 5},
            *supervisor_answering()[1:],
        ],
        "worker": [ANSWER, REPORT],
    }
    async with live(tmp_path, answer_task, script) as run:
        error = await run.watch.wait(is_(ev.ModelError))
        await run.shown(lambda app: app.state.phase == "paused" and app.provider_error is not None)
        assert not error.fatal  # type: ignore[attr-defined]
        assert "500" in run.app.query_one("#status").render().plain  # type: ignore[attr-defined]
        await run.pilot.press("space")
        finished = await run.finished()
    assert finished.status == "finished" and finished.reason == "submitted"


async def test_x_opens_the_newest_collapsed_output_not_a_short_call_after_it(
    tmp_path: Path, answer_task: Path
) -> None:
    """`x` with no call focused opens the newest call whose output is collapsed. It
    toggled the newest call of all: after a long command and a short one (a recipe's
    train.py, then `submit`), the long one kept its `… (x to expand) …` and x did nothing."""
    long = "for i in $(seq 1 40); do echo line $i; done"
    script = worker(turn("", call("bash", command=long)), ANSWER, REPORT)
    async with live(tmp_path, answer_task, script) as run:
        await run.finished()
        entries = run.app.query(ToolEntry)
        await run.shown(lambda app: any("x to expand" in str(e.content) for e in entries))
        run.app.query_one(TranscriptPane).focus()  # as after F and back: no call focused
        await run.pilot.press("x")
        await run.shown(lambda app: any("line 20" in str(e.content) for e in entries))
    assert not any("x to expand" in str(e.content) for e in run.app.query(ToolEntry))


async def test_a_call_written_as_text_shows_as_the_call_not_as_a_thought_left_thinking(
    tmp_path: Path, answer_task: Path
) -> None:
    """A model that writes its calls as text (`--tool-calls text`, small local models)
    streams the call's JSON as text first. The answer had no other text, so no thought
    ended that stream: it stayed `thinking: <tool_call>{...}` above the call, for good."""
    as_text = (
        '<tool_call>{"name": "bash", "arguments": {"command": "echo 42 > answer.txt"}}</tool_call>'
    )
    script = worker(
        turn(as_text),
        turn('<tool_call>{"name": "report", "arguments": {"summary": "done"}}</tool_call>'),
    )
    async with live(tmp_path, answer_task, script, tool_calls="text") as run:
        assert (await run.finished()).reason == "submitted"
        await run.shown(lambda app: any(e.result is not None for e in app.query(ToolEntry)))
        await run.pilot.pause(0.1)
        shown = [str(e.content) for e in run.app.query(TranscriptPane).first().children]
    assert any(isinstance(e, ev.TextDelta) and "tool_call" in e.text for e in run.watch.events)
    assert not any("tool_call" in line or "thinking" in line for line in shown), shown
    assert any("echo 42 > answer.txt" in line for line in shown)


async def test_a_call_the_model_wrote_while_paused_shows_as_not_begun(
    tmp_path: Path, answer_task: Path
) -> None:
    """Space while the model writes: its call is recorded, and the pause holds it before
    it runs. The call said `running…` and the status line `bash 3s: …`, as if it ran;
    stopped then, its result said it never began. Now both say it has not begun."""
    script = worker({"hold": "paused", **ANSWER}, REPORT)
    async with live(tmp_path, answer_task, script) as run:
        await run.watch.wait(is_(ev.StepStarted, agent="worker"))
        await run.pilot.press("space")
        paused = await run.watch.wait(is_(ev.Control, action="pause"))
        run.server.release("paused")  # the model answers once the pause is recorded
        called = await run.watch.wait(is_(ev.ToolCall, tool="bash"))
        assert called.seq > paused.seq
        await run.shown(lambda app: "bash before it runs" in status_line(app))
        entries = run.app.query(ToolEntry)
        await run.shown(lambda app: any("not begun yet" in str(e.content) for e in entries))
        await run.pilot.press("space")
        await run.watch.wait(lambda e: isinstance(e, ev.ToolResult) and e.tool == "bash")
        await run.shown(lambda app: not any("not begun" in str(e.content) for e in entries))
        assert (await run.finished()).reason == "submitted"


def status_line(app: MlraApp) -> str:
    return str(app.query_one(StatusBar).content)
