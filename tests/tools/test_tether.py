"""An unconfined sandbox's processes die with the mlra process that owns them, however
it dies (tools/sandbox/tether.py): bubblewrap's `--die-with-parent` has no counterpart
without bubblewrap, so a killed mlra left its commands running for ever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from mlra.tools.sandbox.tether import MARKER_VAR, kill_marked

OWNER = """
import asyncio, sys
from pathlib import Path
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox

async def main():
    box = LocalSandbox(Path(sys.argv[1]), SandboxSpec(), isolation_mode="none")
    await box.start()
    await box.exec(["sh", "-c", "setsid sleep 600 >/dev/null 2>&1 </dev/null &"], timeout=30)
    running = asyncio.create_task(box.exec(["sleep", "601"], timeout=600))
    while not box.command_pids():
        await asyncio.sleep(0.01)
    print(box._marker, flush=True)
    await running

asyncio.run(main())
"""


def _marked(marker: str) -> list[int]:
    """The live processes that carry the sandbox's marker."""
    prefix = f"{MARKER_VAR}=".encode()
    found: list[int] = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        chains = [
            e[len(prefix) :].split(b":") for e in environ.split(b"\0") if e.startswith(prefix)
        ]
        if stat[stat.rfind(b")") + 2 :][:1] != b"Z" and any(marker.encode() in c for c in chains):
            found.append(int(entry))
    return found


def _wait_for(condition: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_a_killed_owners_unconfined_commands_are_killed(tmp_path: Path) -> None:
    """SIGKILLed, the owner left its running command and a daemon that left its session
    (`setsid`) running on, owned by no one; now the tether kills both."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(workspace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    marker = ""
    try:
        assert owner.stdout is not None
        marker = owner.stdout.readline().decode().strip()
        assert marker, owner.stderr.read().decode() if owner.stderr else ""
        assert _wait_for(lambda: len(_marked(marker)) >= 2, 20), "the sleeps never ran"
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        assert _wait_for(lambda: not _marked(marker), 20), (
            f"still running after mlra was killed: {_marked(marker)}"
        )
    finally:
        owner.kill()
        owner.wait()
        if marker:
            kill_marked(marker)  # on the old code, not to leave them running


async def test_a_closed_sandbox_lets_its_watcher_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A normal close ends the watcher without it killing anything. In a mlra that runs
    in an outer sandbox, the watcher does not carry the outer's marker: the outer's
    cleanup kills this mlra, and the watcher must live on to kill what it started."""
    monkeypatch.setenv(MARKER_VAR, "outer")
    box = LocalSandbox(tmp_path, SandboxSpec(), isolation_mode="none")
    await box.start()
    tether = box._tether
    assert tether is not None
    watcher = tether.process.pid
    assert MARKER_VAR.encode() not in Path(f"/proc/{watcher}/environ").read_bytes()
    assert os.getsid(watcher) == watcher  # a Ctrl-C to the terminal's group misses it
    await box.close()
    assert tether.process.returncode == 0  # released: it killed nothing (else KILLED)
    assert box._tether is None


async def test_an_outer_sandboxs_cleanup_reaches_a_nested_sandboxs_daemons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mlra in an outer unconfined sandbox marks its own commands with the outer's
    marker too: killing by the outer's marker (its close, or its watcher when the outer
    mlra was killed) reaches a daemon the nested sandbox's command left, which carried
    only the nested marker and ran on."""
    monkeypatch.setenv(MARKER_VAR, "outer-5521")
    box = LocalSandbox(tmp_path, SandboxSpec(), isolation_mode="none")
    try:
        await box.exec(["sh", "-c", "setsid sleep 602 >/dev/null 2>&1 </dev/null &"], timeout=30)
        assert _marked(box._marker), "the daemon never ran"
        kill_marked("outer-5521")
        assert not _marked(box._marker)
    finally:
        await box.close()
