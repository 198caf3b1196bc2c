"""An unconfined sandbox's processes die with the mlra process that owns them, however
it dies (tools/sandbox/tether.py): bubblewrap's `--die-with-parent` has no counterpart
without bubblewrap, so a killed mlra left its commands running for ever."""

from __future__ import annotations

import errno
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlra.tools.sandbox import tether as tether_module
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from mlra.tools.sandbox.tether import KILLED, MARKER_VAR, Tether, kill_marked

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
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-tether-test")
    box = LocalSandbox(tmp_path, SandboxSpec(), isolation_mode="none")
    assert not any("tether" in notice for notice in await box.start())
    tether = box._tether
    assert tether is not None
    watcher = tether.process.pid
    environ = Path(f"/proc/{watcher}/environ").read_bytes()
    assert MARKER_VAR.encode() not in environ
    assert b"sk-tether-test" not in environ  # it gets mlra's PATH, none of its keys
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


def _marked_sleep(chain: str) -> subprocess.Popen[bytes]:
    """A process carrying this marker chain, as a sandbox's command would."""
    return subprocess.Popen(["sleep", "603"], env={**os.environ, MARKER_VAR: chain})


async def _runs_untethered(box: LocalSandbox) -> list[str]:
    """The start's notices, the sandbox's commands run all the same, and it closes."""
    try:
        notices = await box.start()
        assert box._tether is None
        result = await box.exec(["echo", "still runs"], timeout=30)
        assert result.exit_code == 0 and "still runs" in result.output
    finally:
        await box.close()
    return [n for n in notices if "may outlive mlra if it is killed" in n]


async def test_a_watcher_that_dies_at_once_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watcher that could not run (a zipped install, a stripped wheel) left the run
    silently untethered; now the start says so once, and the sandbox works."""
    monkeypatch.setattr(tether_module, "WATCHER_SCRIPT", str(tmp_path / "gone.py"))
    box = LocalSandbox(tmp_path, SandboxSpec(), isolation_mode="none")
    [notice] = await _runs_untethered(box)
    assert "the tether did not start (the watcher exited with status 2" in notice
    assert "gone.py" in notice  # its own last word says why


async def test_a_watcher_that_cannot_be_spawned_does_not_fail_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No process left to fork (EAGAIN) failed the whole start, leaving its cgroups
    behind; now it is the same notice, and the sandbox works."""

    popen = subprocess.Popen

    def refused(argv: list[str], **kwargs: object) -> object:
        if tether_module.WATCHER_SCRIPT in argv:
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
        return popen(argv, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "Popen", refused)
    box = LocalSandbox(tmp_path, SandboxSpec(), isolation_mode="none")
    [notice] = await _runs_untethered(box)
    assert "could not be spawned: [Errno 11] Resource temporarily unavailable" in notice


async def test_a_stray_byte_neither_releases_nor_fires_the_watcher() -> None:
    """Any byte but "r" down the pipe (reopened through /proc) made the watcher kill the
    sandbox's processes with mlra alive; now only the token, sent before any command
    ran, releases it, and other bytes do nothing."""
    marker = secrets.token_hex(8)
    tether, notices = await Tether.start(marker, [])
    assert tether is not None and not notices
    sleeper = _marked_sleep(marker)
    try:
        with open(f"/proc/{tether.process.pid}/fd/0", "wb", buffering=0) as pipe:
            pipe.write(b"r")
            pipe.write(b"x" * 64)
        tether.release()
        assert tether.process.returncode == 0  # released: not KILLED
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


async def test_a_failed_stop_lets_the_watcher_kill_what_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A close whose stop raised still ends the watcher: it kills what the stop left."""
    box = LocalSandbox(tmp_path, SandboxSpec(), isolation_mode="none")
    await box.exec(["sh", "-c", "setsid sleep 604 >/dev/null 2>&1 </dev/null &"], timeout=30)
    tether = box._tether
    assert tether is not None and _marked(box._marker)

    async def fails() -> None:
        raise RuntimeError("stop failed")

    monkeypatch.setattr(box, "stop_processes", fails)
    try:
        with pytest.raises(RuntimeError, match="stop failed"):
            await box.close()
        assert tether.process.returncode == KILLED
        assert not _marked(box._marker)
    finally:
        monkeypatch.undo()
        await box.close()


async def test_closing_one_sandbox_leaves_a_siblings_processes(tmp_path: Path) -> None:
    """Two unconfined sandboxes of one mlra (the agent's, the grader's): one's close
    kills its own daemon, not the other's."""
    for name in "ab":
        (tmp_path / name).mkdir()
    boxes = [LocalSandbox(tmp_path / n, SandboxSpec(), isolation_mode="none") for n in "ab"]
    try:
        for box in boxes:
            await box.exec(
                ["sh", "-c", "setsid sleep 605 >/dev/null 2>&1 </dev/null &"], timeout=30
            )
        await boxes[0].close()
        assert not _marked(boxes[0]._marker)
        assert _marked(boxes[1]._marker)
    finally:
        for box in boxes:
            await box.close()


def test_kill_marked_matches_whole_markers_only() -> None:
    """A marker is one whole link of the chain: "ab" is not "abc" nor part of "a:b", and
    an empty marker (an empty link, "x::y") matches nothing."""
    base = secrets.token_hex(4)
    chains = {
        f"{base}ab": True,
        f"outer{base}:{base}ab": True,
        f"{base}abc": False,
        f"{base}a:b": False,
        f"x{base}ab": False,
        "": False,
        f"{base}x::y": False,
    }
    sleepers = {chain: _marked_sleep(chain) for chain in chains}
    try:
        kill_marked("")
        kill_marked(f"{base}ab")
        for chain, killed in chains.items():
            if killed:
                assert sleepers[chain].wait(5) == -signal.SIGKILL, chain
            else:
                assert sleepers[chain].poll() is None, chain
    finally:
        for sleeper in sleepers.values():
            sleeper.kill()
            sleeper.wait()
