"""A notification whose text the agent wrote (a held call's arguments) reaches every
destination, each escaped for itself: Slack markup (`<!channel>`, a link disguised
under harmless words, `@here`) shown as text in the chat `text`, the desktop's body
markup as entities, and a lone surrogate or a NUL (which JSON, an environment variable
or an argument cannot carry) as U+FFFD instead of stopping the notification.

A whole run over the scripted model server, its call held at a breakpoint, with a
`cmd:` command, a webhook on a loopback HTTP server and a desktop notifier stood in
for by a script on PATH; what is asserted is what each of them received.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.notify import Notification
from mlra.agent.notify.command import Command
from mlra.agent.notify.payload import payload, slack_text
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

POISON = "<!channel> <https://evil.example/x|the results> @here &amp; \ud800"


class _Hooks(BaseHTTPRequestHandler):
    received: list[bytes]

    def do_POST(self) -> None:
        self.received.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[tuple[str, list[bytes]]]:
    received: list[bytes] = []
    server = HTTPServer(("127.0.0.1", 0), type("Hooks", (_Hooks,), {"received": received}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook", received
    finally:
        server.shutdown()
        server.server_close()


def _desktop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `notify-send` on PATH that writes its arguments, a line each (NUL-free: what a
    real one is handed), and a desktop session for it."""
    bin_dir, shown = tmp_path / "bin", tmp_path / "shown.txt"
    bin_dir.mkdir()
    sender = bin_dir / "notify-send"
    sender.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" >> {shown}\n")
    sender.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("DISPLAY", ":0")
    return shown


async def test_a_held_call_with_slack_markup_and_a_lone_surrogate_reaches_every_destination(
    tmp_path: Path,
    answer_task: Path,
    hook: tuple[str, list[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, received = hook
    shown = _desktop(tmp_path, monkeypatch)
    heard, envs = tmp_path / "heard.jsonl", tmp_path / "env.txt"
    command = f"cat >> {heard}; env >> {envs}"
    worker = [
        turn("", call("bash", command=f"echo '{POISON}'")),
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]
    script = {"supervisor": supervisor_answering(), "worker": worker}
    with ScriptedModelServer(script, turn_by_history=True) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer",
            model="openai/test",
            runs_dir=tmp_path / "runs",
            run_id="poisoned",
            isolation="none",
            notify=[f"cmd:{command}", url, "desktop"],
            breakpoints=["bash"],
        )
        controller = RunController(config, load_task(answer_task), provider)
        controller.prepare()
        loop = asyncio.get_running_loop()

        def held(event: ev.Event) -> None:
            if isinstance(event, ev.ApprovalRequested):
                poisoned = "\ud800" in json.dumps(event.arguments, ensure_ascii=False)
                act = controller.reject if poisoned else controller.approve
                loop.call_soon(act, event.call_id)

        controller.subscribe(held)
        result = await controller.run(agent_for)
        if controller.provider is not None:
            await controller.provider.aclose()
    assert result.status == "finished" and result.score == 1.0

    told = [json.loads(line) for line in heard.read_text(encoding="utf-8").splitlines()]
    (approval, *_) = [n for n in told if n["kind"] == "approval" and "channel" in n["message"]]
    # The command and the webhook got the very same bytes.
    bodies = [json.loads(body) for body in received]
    assert approval in bodies
    text = approval["text"]
    assert "<" not in text and ">" not in text and "\ud800" not in text
    assert "&lt;!channel&gt; &lt;https://evil.example/x|the results&gt;" in text
    assert "@\u200bhere" in text and "&amp;amp;" in text and "\ufffd" in text
    # The plain fields say what the agent wrote, bar the surrogate.
    assert (
        "<!channel> <https://evil.example/x|the results> @here &amp; \ufffd" in approval["message"]
    )
    env = envs.read_text(encoding="utf-8", errors="strict")
    assert "MLRA_NOTIFY_MESSAGE=" in env and "\ufffd" in env
    desktop = shown.read_text(encoding="utf-8")
    assert "&lt;!channel&gt; &lt;https://evil.example/x|the results&gt;" in desktop
    assert "<!channel>" not in desktop
    log = read_events(controller.run_dir / "events.jsonl")
    failed = [e.message for e in log if isinstance(e, ev.Notice) and "failed" in e.message]
    assert failed == []
    assert {n["kind"] for n in told} == {"approval", "finished"}


async def test_a_nul_and_a_lone_surrogate_are_sendable_everywhere(tmp_path: Path) -> None:
    """Made anywhere (a batch's notes too), a notification carries neither: the JSON
    encodes, and the command's environment and arguments can hold every field."""
    note = Notification(
        kind="finished",
        title="t\x00\ud800",
        message="m\x00 <!here>",
        run_id="r\udcff",
        run_dir="/r",
        counts={"fin\ud800": 1},
    )
    assert (note.title, note.message, note.run_id) == (
        "t\ufffd\ufffd",
        "m\ufffd <!here>",
        "r\ufffd",
    )
    assert note.counts == {"fin\ufffd": 1}
    body = json.loads(payload(note))
    assert (
        body["text"] == "t\ufffd\ufffd: m\ufffd &lt;!here&gt;" and body["message"] == note.message
    )
    out = tmp_path / "out.json"
    await Command(f"cat > {out}; printf '%s' \"$MLRA_NOTIFY_TITLE\" >> {out}.title").send(note)
    assert json.loads(out.read_text(encoding="utf-8")) == body
    assert Path(f"{out}.title").read_text(encoding="utf-8") == "t\ufffd\ufffd"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("<!channel>", "&lt;!channel&gt;"),
        ("<https://evil|docs>", "&lt;https://evil|docs&gt;"),
        ("<@U123> & <#C1>", "&lt;@U123&gt; &amp; &lt;#C1&gt;"),
        ("@channel @Here @everyone @all", "@\u200bchannel @\u200bHere @\u200beveryone @\u200ball"),
        ("me@channels.org and @allen", "me@channels.org and @allen"),
    ],
)
def test_slack_text_forms_no_mention_or_link(text: str, shown: str) -> None:
    assert slack_text(text) == shown
