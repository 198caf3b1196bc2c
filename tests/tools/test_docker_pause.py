"""Pausing a run in the Docker sandbox (against the real test engine, as
test_docker_sandbox.py): every process the agent started stops, daemons included."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from tests.tools.test_docker_sandbox import _containers, _sandbox

DAEMON = (
    "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > beat.new; mv beat.new beat;"
    " sleep 0.05; done' >/dev/null 2>&1 < /dev/null & while [ ! -s beat ]; do sleep 0.05; done"
)
"""A daemon that left its command's session (as `setsid`, many launchers, do), counting
into `beat` every 50 ms; each count is written whole and renamed into place."""


async def test_a_pause_stops_a_daemon_that_left_its_commands_session(
    tmp_path: Path,
    client: Any,
    docker_host: str,
) -> None:
    """A pause sent SIGSTOP to each running command's session only: a training the agent
    had started with setsid went on through the pause, taking the GPU and the CPU the
    researcher had paused the run to have."""
    sandbox = _sandbox(tmp_path / "ws", "pause-test")
    await sandbox.start()
    try:
        await sandbox.exec(["sh", "-c", DAEMON], timeout=30)
        beat = tmp_path / "ws" / "beat"
        sandbox.suspend_commands()
        await sandbox._signals.settle()  # the signals are sent in the background
        paused = beat.read_text()
        await asyncio.sleep(0.5)  # ten beats, had it gone on
        assert beat.read_text() == paused
        sandbox.resume_commands()
        await sandbox._signals.settle()
        deadline = time.monotonic() + 10
        while beat.read_text() == paused:  # it goes on where it stopped
            assert time.monotonic() < deadline, "the daemon did not go on after the resume"
            await asyncio.sleep(0.05)
    finally:
        await sandbox.close()
    assert _containers(client, "pause-test") == []


async def test_a_command_cancelled_while_paused_ends_at_once(
    tmp_path: Path,
    client: Any,
    docker_host: str,
    monkeypatch: Any,
) -> None:
    """A stop of a paused run cancels its running command: the pause had stopped the
    command's wrapper too (every process but init and the main one), so the killed
    command's exec never ended and each cancel waited out KILL_WAIT_S (5 s a command)
    before the run could end. Made long here, a wait that comes at all fails the test."""
    from mlra.tools.sandbox import docker_exec

    monkeypatch.setattr(docker_exec, "KILL_WAIT_S", 120.0)
    sandbox = _sandbox(tmp_path / "ws", "pause-cancel-test")
    await sandbox.start()
    try:
        seen = asyncio.Event()
        task = asyncio.create_task(
            sandbox.exec(
                ["sh", "-c", "echo go; sleep 300"], timeout=600, on_output=lambda s, t: seen.set()
            )
        )
        await seen.wait()
        sandbox.suspend_commands()
        await sandbox._signals.settle()
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=60)
        assert done, "the cancelled command waited for an exec its pause had stopped"
    finally:
        await sandbox.close()
    assert _containers(client, "pause-cancel-test") == []
