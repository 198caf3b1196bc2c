"""A Docker run's commands' stdin, against the host user who has the container's uid.

The container runs as the workspace's owner or uid 1000, which on many hosts is a
real person (here: /etc/passwd's `cloudsdk`). The host folder the stdin goes through
was handed to that uid: they read each command's input, replaced it with their own
before the command opened it, and could rename the folder (theirs, in sticky /tmp)
away for a link that had root write the next file where it led. Tried here as that
user, in a process of its own, against a real container.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.docker_exec import STDIN_DIR
from mlra.tools.sandbox.docker_stdin import stdin_folder_of
from tests.conftest import TEST_IMAGE

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")


def _as_user(uid: int, script: str) -> subprocess.CompletedProcess[str]:
    """A shell of the host user `uid`, with no other group: the other local user."""
    return subprocess.run(
        ["sh", "-c", script], user=uid, group=uid, extra_groups=[],
        capture_output=True, text=True, timeout=30, cwd="/",
    )  # fmt: skip


async def test_the_containers_uid_on_the_host_cannot_read_feed_or_move_a_commands_stdin(
    tmp_path: Path, docker_host: str
) -> None:
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    workspace = tmp_path / "workspace"
    workspace.mkdir()  # root's: the container runs as uid 1000
    sandbox = DockerSandbox(workspace, SandboxSpec(), image=TEST_IMAGE, run_id="stdin-owner")
    await sandbox.start()
    mounts: list[dict[str, Any]] = sandbox.container.attrs["Mounts"]
    (shown,) = [Path(m["Source"]) for m in mounts if m["Destination"] == STDIN_DIR]
    folder = stdin_folder_of(shown)
    assert folder is not None
    taken = Path(f"/tmp/taken-{folder.name}")  # where that user may write
    try:
        # The command waits for the go-ahead, its stdin's file in the folder meanwhile.
        waiting = "while [ ! -e go ]; do sleep 0.05; done; cat"
        command = sandbox.exec(["sh", "-c", waiting], timeout=60, stdin=b"the-secret-input\n")
        running = asyncio.ensure_future(command)
        while not any(shown.glob("*.in")):  # the file is written before the exec starts
            assert not running.done(), running.result()
            await asyncio.sleep(0.05)
        uid = sandbox.uid
        read = _as_user(uid, f"ls -a {shown}; cat {shown}/*.in")
        fed = _as_user(uid, f"echo from-the-other-user > {shown}/planted.in")
        planted = (shown / "planted.in").exists()
        moved = _as_user(uid, f"mv {folder} {taken} && ln -s /etc {folder}")
        (workspace / "go").touch()
        result = await running
    finally:
        await sandbox.close()
        kept = os.path.lexists(folder)
        for left in (folder, taken):  # what the user moved, were it let
            if left.is_symlink():
                left.unlink()
            elif left.exists():
                shutil.rmtree(left)
    assert "the-secret-input" not in read.stdout and read.returncode != 0, read
    assert fed.returncode != 0 and not planted, fed
    assert moved.returncode != 0, moved
    assert result.exit_code == 0 and result.output == "the-secret-input\n", result
    assert not kept  # removed with the container
