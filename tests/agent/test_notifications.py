"""Notifications (`--notify`): a user who walked away is told what needs them.

Whole runs in-process over the scripted model server on loopback (the real OpenAI
SDK), with real destinations: a `cmd:` shell command that appends the JSON it reads
to a file, and a webhook on a loopback HTTP server in a thread. What is asserted is
what the user receives: the kinds, the final score, and that the API key never
reaches the command; and that a dead webhook costs one warning, never the run.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop.clock import RunClock
from mlra.agent.loop.controls import Controls
from mlra.agent.loop.drive import warning_left_s, watch_deadline
from mlra.agent.notify import Notification, NotifyFailed, desktop, parse_destinations
from mlra.agent.notify.triggers import Triggers
from mlra.agent.notify.webhook import Webhook
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.conftest import clock_from
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

API_KEY = "sk-notify-test-do-not-leak"


def _worker_validating() -> list[dict[str, Any]]:
    return [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("validate", path="answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]


def _controller(
    server: ScriptedModelServer, task: Path, runs: Path, notify: list[str], **config: Any
) -> RunController:
    provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
    cfg = RunConfig(
        task="answer",
        model="openai/test",
        runs_dir=runs,
        run_id="notified",
        isolation="none",
        notify=notify,
        **config,
    )
    controller = RunController(cfg, load_task(task), provider)
    controller.prepare()
    return controller


async def _close(controller: RunController) -> None:
    if controller.provider is not None:
        await controller.provider.aclose()


def _on(controller: RunController, kind: type, act: Callable[[Any], object]) -> None:
    """Act on each event of a kind once it is written (not inside the log's fan-out)."""
    loop = asyncio.get_running_loop()

    def seen(event: ev.Event) -> None:
        if isinstance(event, kind):
            loop.call_soon(act, event)

    controller.subscribe(seen)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_a_command_hears_of_the_approval_the_best_validation_and_the_end(
    tmp_path: Path, answer_task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("HF_TOKEN", API_KEY)
    heard, envs = tmp_path / "heard.jsonl", tmp_path / "env.txt"
    command = f"cat >> {heard}; env >> {envs}; echo --- >> {envs}"
    script = {"supervisor": supervisor_answering(), "worker": _worker_validating()}
    with ScriptedModelServer(script, turn_by_history=True) as server:
        controller = _controller(
            server, answer_task, tmp_path / "runs", [f"cmd:{command}"], breakpoints=["bash"]
        )
        _on(controller, ev.ApprovalRequested, lambda e: controller.approve(e.call_id))
        result = await controller.run(agent_for)
        await _close(controller)
    assert result.status == "finished" and result.score == 1.0
    notes = _lines(heard)
    assert sorted(n["kind"] for n in notes) == ["approval", "best_validation", "finished"]
    by_kind = {n["kind"]: n for n in notes}
    assert by_kind["approval"]["tool"] == "bash" and "echo 42" in by_kind["approval"]["message"]
    assert by_kind["best_validation"]["score"] == 0.5  # the validation split's score for 42
    end = by_kind["finished"]
    assert (end["status"], end["reason"], end["score"], end["success"]) == (
        "finished",
        "submitted",
        1.0,
        True,
    )
    assert end["run_id"] == "notified" and end["run_dir"] == str(controller.run_dir)
    assert "exact_match = 1" in end["message"]
    told = envs.read_text()
    assert "MLRA_NOTIFY_KIND=finished" in told and f"MLRA_RUN_DIR={controller.run_dir}" in told
    assert API_KEY not in told and "OPENAI_API_KEY" not in told and "HF_TOKEN" not in told
    log = read_events(controller.run_dir / "events.jsonl")
    where = [e.message for e in log if isinstance(e, ev.Notice) and "notifications go" in e.message]
    assert where == ["notifications go to command"]
    assert command not in (controller.run_dir / "events.jsonl").read_text()


class _Hooks(BaseHTTPRequestHandler):
    received: list[tuple[str, str, dict[str, Any]]]
    arrived: threading.Event

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Content-Type"], json.loads(body)))
        self.send_response(204)
        self.end_headers()
        self.arrived.set()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def hooks() -> Iterator[tuple[str, type[_Hooks]]]:
    handler = type("Hooks", (_Hooks,), {"received": [], "arrived": threading.Event()})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", handler
    finally:
        server.shutdown()
        server.server_close()


def _answering() -> dict[str, Any]:
    worker = [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]
    return {"supervisor": supervisor_answering(), "worker": worker}


async def test_a_webhook_receives_the_end_as_json_and_its_token_is_never_written(
    tmp_path: Path, answer_task: Path, hooks: tuple[str, type[_Hooks]]
) -> None:
    base, handler = hooks
    url = f"{base}/hook/T0KEN-secret?key=abc"
    with ScriptedModelServer(_answering(), turn_by_history=True) as server:
        controller = _controller(server, answer_task, tmp_path / "runs", [url])
        result = await controller.run(agent_for)
        await _close(controller)
    assert result.status == "finished" and result.score == 1.0
    # Delivered before run() returned: the run drains its sends before it closes.
    (path, content_type, body) = handler.received[-1]
    assert path == "/hook/T0KEN-secret?key=abc" and content_type == "application/json"
    assert (body["kind"], body["score"], body["metric"]) == ("finished", 1.0, "exact_match")
    assert body["text"].startswith("mlra: run finished")
    for written in ("events.jsonl", "result.json"):
        text = (controller.run_dir / written).read_text()
        assert "T0KEN" not in text and "key=abc" not in text
    port = base.rsplit(":", 1)[1]
    assert (
        f"notifications go to webhook to 127.0.0.1:{port}"
        in (controller.run_dir / "events.jsonl").read_text()
    )


async def test_an_unreachable_webhook_is_one_warning_and_the_run_ends_as_ever(
    tmp_path: Path, answer_task: Path
) -> None:
    with socket.socket() as probe:  # a port nothing listens on: the connection is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = {"supervisor": supervisor_answering(), "worker": _worker_validating()}
    with ScriptedModelServer(script, turn_by_history=True) as server:
        controller = _controller(
            server, answer_task, tmp_path / "runs", [f"http://127.0.0.1:{port}/x"]
        )
        result = await controller.run(agent_for)
        await _close(controller)
    assert (result.status, result.reason, result.score) == ("finished", "submitted", 1.0)
    log = read_events(controller.run_dir / "events.jsonl")
    notes = [e for e in log if isinstance(e, ev.Notice) and "notification" in e.message]
    warnings = [e for e in notes if e.level == "warning"]
    assert len(warnings) == 1, warnings  # two sends failed (the validation, the end)
    assert f"notification to webhook to 127.0.0.1:{port} failed" in warnings[0].message
    assert f"webhook to 127.0.0.1:{port} 2 times" in notes[-1].message  # counted, at the end
    assert isinstance(log[-1], ev.Notice | ev.RunFinished)  # nothing after the end but notes


async def test_the_time_warning_comes_once_with_a_tenth_of_the_time_left() -> None:
    clock, warned = RunClock(1.0), []
    clock.start()
    ending = await watch_deadline(clock, Controls(), warned.append)
    assert ending.reason == "deadline" and len(warned) == 1
    assert 0 < warned[0] <= warning_left_s(1.0) == pytest.approx(0.1)
    assert warning_left_s(24 * 3600) == 600.0  # ten minutes at most


def test_a_provider_failure_that_paused_the_run_is_told_with_its_error() -> None:
    triggers = Triggers("r1", Path("/runs/r1"))
    error = ev.ModelError(agent="worker", model="openai/x", error="HTTP 503", fatal=False)
    assert triggers.notification(error) is None
    note = triggers.notification(ev.Control(action="pause", source="system"))
    assert note is not None and note.kind == "provider_paused" and "HTTP 503" in note.message
    # The user's own pause is no provider failure.
    assert triggers.notification(ev.Control(action="pause")) is None


def test_a_lower_is_better_search_is_told_only_of_a_better_attempt() -> None:
    triggers = Triggers("r1", Path("/runs/r1"))

    def attempt(name: str, score: float) -> ev.AttemptFinished:
        return ev.AttemptFinished(
            attempt=name, status="validated", score=score, metric="loss", higher_is_better=False
        )

    told = [
        triggers.notification(attempt(n, s)) for n, s in (("a1", 2.0), ("a2", 3.0), ("a3", 1.5))
    ]
    assert [n.score if n else None for n in told] == [2.0, None, 1.5]


@pytest.mark.parametrize(
    ("written", "described"),
    [
        ("bell", ["bell"]),
        ("bell,desktop", ["bell", "desktop"]),
        ("https://hooks.example.com/services/T/B/XYZ", ["webhook to hooks.example.com"]),
        ("bell,cmd:notify.sh a,b", ["bell", "command"]),  # a command takes the rest
        ("http://user:pw@10.0.0.1:8080/h", ["webhook to 10.0.0.1:8080"]),
    ],
)
def test_destinations_as_written_and_as_logged(written: str, described: list[str]) -> None:
    found = parse_destinations(written)
    assert [d.described for d in found] == described
    if "cmd:" in written:
        assert found[-1].value == "notify.sh a,b"


@pytest.mark.parametrize(
    "bad", ["beep", "cmd:", "ftp://host/x", "https://", "bell,,desktop", "bell,", "http://h:x/"]
)
def test_a_bad_destination_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_destinations(bad)


async def test_a_provider_failure_that_pauses_the_run_and_the_time_warning_notify(
    tmp_path: Path, answer_task: Path
) -> None:
    """The model provider refuses a request (HTTP 400, not retried): the run pauses for the
    user, who is told with the provider's error and resumes; later the clock runs low while
    a command runs, and the deadline ends the run. Each is one notification, in order."""
    heard = tmp_path / "heard.jsonl"
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            {"status": 400, "times": 1},
            turn("", call("bash", command="echo 42 > answer.txt; sleep 30")),
        ],
    }
    with ScriptedModelServer(script) as server:
        controller = _controller(
            server,
            answer_task,
            tmp_path / "runs",
            [f"cmd:cat >> {heard}"],
            on_provider_failure="pause",
            time_limit_s=3.0,
        )
        paused_by_provider = lambda e: e.action == "pause" and e.source == "system"  # noqa: E731
        _on(controller, ev.Control, lambda e: paused_by_provider(e) and controller.resume())
        # The clock stands at 0.5 s of the 3 s until the command starts, however long the
        # steps before took on a busy machine (they could bring the warning before the
        # provider's pause): 2.5 s left then, about what an idle machine left.
        bash_starts = lambda e: isinstance(e, ev.ToolCall) and e.tool == "bash"  # noqa: E731
        clock_from(controller, bash_starts, already=0.5)
        result = await controller.run(agent_for)
        await _close(controller)
    assert (result.status, result.reason) == ("finished", "deadline")
    notes = _lines(heard)
    kinds = [n["kind"] for n in sorted(notes, key=lambda n: n["seq"])]
    assert kinds == ["provider_paused", "time_warning", "finished"]
    paused = next(n for n in notes if n["kind"] == "provider_paused")
    assert "400" in paused["message"]
    warned = next(n for n in notes if n["kind"] == "time_warning")
    assert "left" in warned["title"] and warned["t"] >= 2.6  # a tenth of 3 s left, not before
    log = read_events(controller.run_dir / "events.jsonl")
    assert sum(isinstance(e, ev.TimeWarning) for e in log) == 1


async def test_a_webhook_that_redirects_is_not_followed() -> None:
    """A redirect would send the notification where the user did not name."""
    seen: list[str] = []

    class Moved(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.path)
            self.send_response(307)
            self.send_header("Location", "/elsewhere")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Moved)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        hook = Webhook(f"http://127.0.0.1:{server.server_port}/hook")
        note = Notification(kind="finished", title="t", message="m", run_id="r", run_dir="/r")
        with pytest.raises(NotifyFailed, match="HTTP 307 \\(a redirect, not followed\\)"):
            await hook.send(note)
    finally:
        server.shutdown()
        server.server_close()
    assert seen == ["/hook"]


async def test_desktop_notifications_go_through_notify_send_where_there_is_a_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The desktop's own notifier is stood in for by a script of the same name on PATH
    (this machine has no desktop); without a session there is one line saying so."""
    bin_dir, shown = tmp_path / "bin", tmp_path / "shown.txt"
    bin_dir.mkdir()
    sender = bin_dir / "notify-send"
    sender.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {shown}\n")
    sender.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    assert desktop.unavailable() == (
        "no desktop session here (none of DISPLAY, WAYLAND_DISPLAY, DBUS_SESSION_BUS_ADDRESS)"
    )
    monkeypatch.setenv("DISPLAY", ":0")
    assert desktop.unavailable() is None
    note = Notification(
        kind="approval", title="mlra: approve?", message="bash ls", run_id="r", run_dir="/r"
    )
    await desktop.Desktop().send(note)
    assert shown.read_text().splitlines() == ["--app-name=mlra", "mlra: approve?", "bash ls"]


async def test_one_destination_hears_its_notifications_in_the_order_they_were_made(
    tmp_path: Path,
) -> None:
    """A command hook is a process per notification: the first one held up (here until
    the test lets it go) no longer lets the second overtake it."""
    from mlra.agent.notify.dispatch import Dispatch

    heard, gate = tmp_path / "heard.txt", tmp_path / "gate"
    hook = (
        'case "$MLRA_NOTIFY_KIND" in server_wait) '
        f"while [ ! -e {gate} ]; do sleep 0.02; done;; esac; "
        f'echo "$MLRA_NOTIFY_KIND" >> {heard}'
    )
    dispatch = Dispatch(parse_destinations(f"cmd:{hook}"), on_failure=pytest.fail)
    for kind in ("server_wait", "server_back"):
        dispatch.send(Notification(kind=kind, title="t", message="m", run_id="r", run_dir="/r"))
    # Unordered, the second was written by now; ordered, it waits for the first.
    for _ in range(50):
        if heard.exists():
            break
        await asyncio.sleep(0.02)
    gate.touch()
    await dispatch.drain()
    assert heard.read_text().split() == ["server_wait", "server_back"]


async def test_a_hung_destination_does_not_hold_the_runs_last_notification_past_the_drain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In order, a destination's sends each waited for the one before it to end: behind
    sends that hang (each cut at its bound), the run's last notification began only once
    they had all been cut, past the drain's bound, and the drain cancelled it unsent."""
    from mlra.agent.notify import dispatch as dispatching

    monkeypatch.setattr(dispatching, "SEND_BOUND_S", 2.0)
    monkeypatch.setattr(dispatching, "ORDER_WAIT_S", 0.5)
    heard = tmp_path / "heard.txt"
    hook = f'case "$MLRA_NOTIFY_KIND" in server_wait) sleep 60;; esac; echo end >> {heard}'
    failures: list[str] = []
    dispatch = dispatching.Dispatch(parse_destinations(f"cmd:{hook}"), on_failure=failures.append)
    for kind in ("server_wait", "server_wait", "server_wait", "finished"):
        dispatch.send(Notification(kind=kind, title="t", message="m", run_id="r", run_dir="/r"))
    await dispatch.drain(bound_s=5.0)
    assert heard.exists() and heard.read_text().split() == ["end"]
    assert failures  # the hung ones were told of, once
