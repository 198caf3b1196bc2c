"""A local command cancelled as it starts is killed whole, at once.

A person's stop of a search's attempt cancels the attempt's task wherever it is; the
stop of an attempt whose recipe had just begun (`bash -c "sleep 300; ..."`, its log
saying the call began) landed while asyncio was still connecting the new process's
pipes. asyncio's own clean-up then killed the shell alone and waited for the pipes to
close, but the shell's `sleep` held them: the stop hung until the `sleep` ended, and
the search, waiting for the attempt, ran into its time limit with nothing submitted
(tests/agent/test_search_counts.py, 1 in 9 on a loaded machine). Here the pipes are
held back until the shell's child runs, and the command is cancelled there.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from tests.conftest import processes_running

ENDS_WITHIN_S = 30.0
"""A bound on a hang, not a race: the cancelled command ends within a few loop turns and
its group's kill; held by its child, it ended with the child (2 min here)."""


async def test_a_command_cancelled_while_its_pipes_connect_is_killed_with_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    sandbox = LocalSandbox(workspace, SandboxSpec(), isolation_mode="none")
    await sandbox.start()
    loop = asyncio.get_running_loop()
    connect: Callable[..., Any] = loop.connect_read_pipe
    let_go = asyncio.Event()

    async def held(*args: Any, **kwargs: Any) -> Any:
        await let_go.wait()
        return await connect(*args, **kwargs)

    # The child's own command line, not the shell's (which says `sleep $S`).
    seconds = f"120.{secrets.randbelow(10**6):06d}"
    child = f"sleep {seconds}"
    monkeypatch.setattr(loop, "connect_read_pipe", held)
    command = asyncio.ensure_future(
        sandbox.exec(["bash", "-c", f"S={seconds}; sleep $S; echo done"], timeout=600)
    )
    try:
        async with asyncio.timeout(60):
            while not processes_running(child):  # noqa: ASYNC110  (another process)
                await asyncio.sleep(0.01)
        command.cancel()  # as its pipes connect: the spawn has not returned
        let_go.set()
        done, _ = await asyncio.wait([command], timeout=ENDS_WITHIN_S)
        assert command in done, "the cancelled command waited for its child's end"
        assert command.cancelled()
        assert not processes_running(child)
    finally:
        let_go.set()
        for pid in processes_running(child):  # the old way's orphan: the test's own
            os.kill(pid, signal.SIGKILL)
        await asyncio.gather(command, return_exceptions=True)
        await sandbox.close()
