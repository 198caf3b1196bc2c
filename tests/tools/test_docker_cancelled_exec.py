"""A Docker command cancelled while its exec is being created or started is killed.

The exec is created and started in a thread (`DockerExec.begin`), which a cancelled
await does not stop. The cancel's kill used to be sent at once: on an engine slower than
the kill script's wait for the session's id (5 s), the script found no session, the
command was dropped from the sandbox's running ones, and then the thread started the
exec, which ran to its end (a person's stop of an attempt left its training running).
Here the exec's start is held until a kill sent meanwhile has ended (the slow engine),
or let go at once where none is sent as the cancel lands.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mlra.tools.sandbox.base import SandboxSpec
from tests.conftest import TEST_IMAGE

HOLD_S = 60.0
"""The longest the exec's start is held: a test that never lets it go fails, not hangs."""


async def test_a_command_cancelled_while_its_exec_starts_does_not_run(
    tmp_path: Path, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import docker.api.client

    from mlra.tools.sandbox.docker_exec import DockerExec, SessionSignals
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    workspace = tmp_path / "ws"
    workspace.mkdir()
    box = DockerSandbox(
        workspace, SandboxSpec(disk_mb=0), image=TEST_IMAGE, run_id="cancelled-exec-test"
    )
    await box.start()
    reached, go, kill_sent = threading.Event(), threading.Event(), threading.Event()
    exec_ids: list[str] = []
    kills: list[str] = []
    real_start = docker.api.client.APIClient.exec_start
    real_kill, real_send = DockerExec.kill, SessionSignals.send_blocking

    def exec_start(api: Any, exec_id: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("stream") and not exec_ids:  # the command's own (a kill's is not streamed)
            exec_ids.append(exec_id)
            reached.set()
            go.wait(HOLD_S)
        return real_start(api, exec_id, *args, **kwargs)

    async def kill(running: DockerExec) -> None:
        kills.append(running.token)
        await real_kill(running)

    def send_blocking(signals: SessionSignals, token: str, sig: str) -> None:
        real_send(signals, token, sig)
        kill_sent.set()

    monkeypatch.setattr(docker.api.client.APIClient, "exec_start", exec_start)
    monkeypatch.setattr(DockerExec, "kill", kill)
    monkeypatch.setattr(SessionSignals, "send_blocking", send_blocking)
    command = asyncio.ensure_future(box.exec(["sh", "-c", "sleep 2; touch ran"], timeout=600))
    try:
        assert await asyncio.to_thread(reached.wait, HOLD_S), "the exec was never started"
        command.cancel()
        for _ in range(10):  # turns of the loop: a kill sent as the cancel lands starts in them
            await asyncio.sleep(0)
        if kills:  # the engine answers after the kill script gave up waiting
            assert await asyncio.to_thread(kill_sent.wait, HOLD_S)
        go.set()
        with pytest.raises(asyncio.CancelledError):
            async with asyncio.timeout(HOLD_S):
                await command
        (exec_id,) = exec_ids
        deadline = time.monotonic() + HOLD_S
        while (await asyncio.to_thread(client.api.exec_inspect, exec_id))["Running"]:
            assert time.monotonic() < deadline, "the cancelled command's exec still runs"
            await asyncio.sleep(0.05)
        assert not (workspace / "ran").exists(), "the cancelled command ran to its end"
    finally:
        go.set()
        command.cancel()
        await asyncio.gather(command, return_exceptions=True)
        await box.close()
