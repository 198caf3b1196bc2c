"""A Docker run's container, against the host user who had its uid.

The container has no user namespace: its processes' uid is the host's. It used to be
the workspace's owner or 1000 (the image's `agent`), which on many hosts is a person
(here: /etc/passwd's `cloudsdk`), who then read a running command's environment and
stdin through /proc/PID, its files through /proc/PID/root, and could ptrace it. As root
mlra now runs each container as a uid no account has (tools/sandbox/run_uid.py). Tried
here as uid 1000, in a process of its own, against a real container.
"""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import secrets
import subprocess
from pathlib import Path

import pytest

from mlra.tools.sandbox.base import SandboxSpec
from tests.conftest import TEST_IMAGE

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
HOST_USER = 1000


def _as_user(uid: int, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", script], user=uid, group=uid, extra_groups=[],
        capture_output=True, text=True, timeout=30, cwd="/",
    )  # fmt: skip


def _pids_of(token: str) -> list[int]:
    found: list[int] = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            if token.encode() in Path(cmdline).read_bytes():
                found.append(int(Path(cmdline).parent.name))
        except (OSError, ValueError):
            continue
    return [p for p in found if p != os.getpid()]


async def test_the_host_user_with_uid_1000_cannot_reach_the_containers_processes(
    tmp_path: Path, docker_host: str
) -> None:
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    canary = f"env-canary-{secrets.token_hex(6)}"
    token = f"mlra-docker-uid-{secrets.token_hex(4)}"
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("mine\n")
    sandbox = DockerSandbox(
        workspace, SandboxSpec(env={"PROBE": canary}), image=TEST_IMAGE, run_id="uid-probe"
    )
    await sandbox.start()
    try:
        uid = sandbox.uid
        assert uid not in (0, HOST_USER)
        with pytest.raises(KeyError):
            pwd.getpwuid(uid)
        assert workspace.stat().st_uid == uid and (workspace / "notes.txt").stat().st_uid == uid
        # The image's tools that ask who they are, and HOME, still work.
        result = await sandbox.exec(
            ["sh", "-c", "id -u; echo $HOME; touch $HOME/x && echo home-ok; "
             "python3 -c 'import getpass; print(getpass.getuser())'; echo more >> notes.txt"],
            timeout=60,
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert result.output.split() == [str(uid), "/tmp/home", "home-ok", "agent"]
        up = asyncio.Event()
        running = asyncio.ensure_future(
            sandbox.exec(
                ["sh", "-c", f"echo up; while [ ! -e go ]; do sleep 0.05; done; cat # {token}"],
                timeout=60,
                stdin=b"the-secret-input\n",
                on_output=lambda _s, text: up.set() if "up" in text else None,
            )
        )
        await asyncio.wait_for(up.wait(), 30)
        pids = _pids_of(token)
        if not pids:
            pytest.skip("the engine's containers are not this host's processes (a VM)")
        owners = {Path(f"/proc/{p}").stat().st_uid for p in pids}
        tried = [
            _as_user(
                HOST_USER, f"cat /proc/{p}/environ /proc/{p}/fd/0; ls /proc/{p}/root/workspace"
            )
            for p in pids
        ]
        traced = _as_user(
            HOST_USER,
            f"python3 -c 'import ctypes, sys; libc = ctypes.CDLL(None); "
            f"sys.exit(libc.ptrace(16, {pids[0]}, 0, 0) != 0)'",
        )
        (workspace / "go").touch()
        ended = await running
    finally:
        await sandbox.close()
    assert owners == {uid}
    for attempt in tried:
        assert attempt.returncode != 0, attempt
        assert canary not in attempt.stdout and "the-secret-input" not in attempt.stdout
        assert "notes.txt" not in attempt.stdout
    assert traced.returncode != 0, traced  # PTRACE_ATTACH refused
    assert ended.exit_code == 0 and "the-secret-input" in ended.output, ended


def test_two_containers_get_different_uids(tmp_path: Path, docker_host: str) -> None:
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    boxes = [
        DockerSandbox(tmp_path / name, SandboxSpec(), image=TEST_IMAGE, run_id=name)
        for name in ("one", "two")
    ]
    assert boxes[0].uid != boxes[1].uid
    assert all(b.uid not in (0, HOST_USER) and b.uid == b.gid for b in boxes)


NOBODY = 65534


async def test_the_hosts_nobody_cannot_hold_the_containers_tie(
    tmp_path: Path, docker_host: str
) -> None:
    """The container's init and main process (docker_tie.py) ran as 65534, the host's
    `nobody`: any host process running as nobody could open their stdin through /proc and
    keep every mlra container up after its mlra died. As root they run as a uid claimed
    for them, no account's and not the commands', given back with the commands' once the
    container is removed."""
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    sandbox = DockerSandbox(workspace, SandboxSpec(), image=TEST_IMAGE, run_id="uid-keeper")
    notices = await sandbox.start()
    try:
        keeper = sandbox.keeper_uid
        assert keeper not in (0, NOBODY, HOST_USER, sandbox.uid), keeper
        with pytest.raises(KeyError):
            pwd.getpwuid(keeper)
        assert not any("tie" in n for n in notices), notices
        sandbox.container.reload()
        init = sandbox.container.attrs["State"]["Pid"]
        assert Path(f"/proc/{init}").stat().st_uid == keeper
        held = _as_user(NOBODY, f"exec 3>/proc/{init}/fd/0 && echo held")
        assert held.returncode != 0 and "held" not in held.stdout, held
        claims = [c.path for c in (sandbox._claim, sandbox._keeper) if c is not None]
        assert len(claims) == 2 and all(p.exists() for p in claims)
        result = await sandbox.exec(["sh", "-c", "id -u"], timeout=60)
        assert result.exit_code == 0 and result.output.split() == [str(sandbox.uid)]
    finally:
        await sandbox.close()
    assert not any(p.exists() for p in claims)  # both uids given back


async def test_commands_running_as_the_keepers_uid_are_told_they_could_hold_the_tie(
    tmp_path: Path, docker_host: str
) -> None:
    """Where the keeper's uid is the commands' (none claimed: a given uid of 65534, as a
    non-root mlra whose workspace is owned by 65534 runs), the run said nothing: it is
    told once that a command could hold the tie."""
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    sandbox = DockerSandbox(
        workspace, SandboxSpec(), image=TEST_IMAGE, run_id="uid-keeper-shared", uid=NOBODY
    )
    notices = await sandbox.start()
    try:
        held = [n for n in notices if "could hold the tie" in n]
        assert len(held) == 1 and str(NOBODY) in held[0], notices
        result = await sandbox.exec(["sh", "-c", "echo hi"], timeout=60)
        assert result.exit_code == 0 and result.output.strip() == "hi"
    finally:
        await sandbox.close()
