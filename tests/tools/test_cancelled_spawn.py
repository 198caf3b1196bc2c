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
from mlra.tools.sandbox.local_processes import run_in_session
from tests.conftest import processes_running

ENDS_WITHIN_S = 30.0
"""A bound on a hang, not a race: the cancelled command ends within a few loop turns and
its group's kill; held by its child, it ended with the child (2 min here)."""


def _held_pipes(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Hold asyncio's connection of a new process's pipes until the returned event is
    set: the spawn has made the process (it runs) but has not returned."""
    loop = asyncio.get_running_loop()
    connect: Callable[..., Any] = loop.connect_read_pipe
    let_go = asyncio.Event()

    async def held(*args: Any, **kwargs: Any) -> Any:
        await let_go.wait()
        return await connect(*args, **kwargs)

    monkeypatch.setattr(loop, "connect_read_pipe", held)
    return let_go


async def _started(workspace: Path) -> LocalSandbox:
    workspace.mkdir()
    sandbox = LocalSandbox(workspace, SandboxSpec(), isolation_mode="none")
    await sandbox.start()
    return sandbox


def _marked_sleep(seconds: int) -> tuple[str, str]:
    """(the shell's script, its child's own command line: the shell's says `sleep $S`)."""
    value = f"{seconds}.{secrets.randbelow(10**6):06d}"
    return f"S={value}; sleep $S; echo done", f"sleep {value}"


async def _child_of_spawn(child: str) -> int:
    async with asyncio.timeout(60):
        while not (pids := processes_running(child)):  # noqa: ASYNC110  (another process)
            await asyncio.sleep(0.01)
    return pids[0]


def _state(pid: int) -> str:
    """The process's state letter from /proc/PID/stat (`T`: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def _held_fork(monkeypatch: pytest.MonkeyPatch) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold the spawn before it forks: (reached, let go)."""
    loop = asyncio.get_running_loop()
    spawn: Callable[..., Any] = loop.subprocess_exec
    reached, let_go = asyncio.Event(), asyncio.Event()

    async def held(*args: Any, **kwargs: Any) -> Any:
        reached.set()
        await let_go.wait()
        return await spawn(*args, **kwargs)

    monkeypatch.setattr(loop, "subprocess_exec", held)
    return reached, let_go


@pytest.mark.parametrize(
    "when", ["as its pipes connect", "twice as its pipes connect", "before its fork"]
)
async def test_a_command_cancelled_as_it_starts_is_killed_with_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    sandbox = await _started(tmp_path / "workspace")
    if when == "before its fork":
        reached, let_go = _held_fork(monkeypatch)
    else:
        reached, let_go = None, _held_pipes(monkeypatch)
    script, child = _marked_sleep(120)
    command = asyncio.ensure_future(sandbox.exec(["bash", "-c", script], timeout=600))
    try:
        if reached is not None:
            async with asyncio.timeout(60):
                await reached.wait()
        else:
            await _child_of_spawn(child)
        command.cancel()  # the spawn has not returned
        if when == "twice as its pipes connect":
            await asyncio.sleep(0)  # the first reaches the spawn's clean-up
            command.cancel()
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


async def test_a_missing_program_cancelled_as_it_starts_ends_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spawn's own failure (no such program: the sandbox looks first, a wrapper in
    front of it would not), met by the cancel's wait for it, leaves the cancellation to
    say how the command ended."""
    reached, let_go = _held_fork(monkeypatch)
    command = asyncio.ensure_future(
        run_in_session(
            ["/nonexistent/mlra-no-such-program"],
            set(),
            suspended=lambda: False,
            timeout=60,
            cwd=str(tmp_path),
            env=dict(os.environ),
        )
    )
    try:
        async with asyncio.timeout(60):
            await reached.wait()
        command.cancel()
        let_go.set()
        done, _ = await asyncio.wait([command], timeout=ENDS_WITHIN_S)
        assert command in done and command.cancelled()
    finally:
        let_go.set()
        await asyncio.gather(command, return_exceptions=True)


async def test_a_pause_made_while_a_command_starts_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause that lands as a command starts (it is not yet among the running ones)
    stops it once it is: before, the command ran on through the pause."""
    sandbox = await _started(tmp_path / "workspace")
    let_go = _held_pipes(monkeypatch)
    script, child = _marked_sleep(120)
    command = asyncio.ensure_future(sandbox.exec(["bash", "-c", script], timeout=600))
    try:
        pid = await _child_of_spawn(child)
        sandbox.suspend_commands()
        let_go.set()
        async with asyncio.timeout(ENDS_WITHIN_S):  # bounds a miss: it would run on
            while _state(pid) != "T":  # noqa: ASYNC110  (another process)
                await asyncio.sleep(0.01)
    finally:
        let_go.set()
        command.cancel()
        await asyncio.gather(command, return_exceptions=True)
        for pid in processes_running(child):  # the old way's orphan: the test's own
            os.kill(pid, signal.SIGKILL)
        await sandbox.close()


async def test_a_resume_made_while_a_command_starts_lets_it_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command started during a pause that is resumed before its spawn returns runs:
    before, it was stopped after the resume, and stayed stopped (hung)."""
    sandbox = await _started(tmp_path / "workspace")
    let_go = _held_pipes(monkeypatch)
    script, child = _marked_sleep(3)
    sandbox.suspend_commands()
    command = asyncio.ensure_future(sandbox.exec(["bash", "-c", script], timeout=600))
    try:
        await _child_of_spawn(child)
        sandbox.resume_commands()
        let_go.set()
        # It ends (its 3 s sleep, then its echo); stopped, it would never.
        done, _ = await asyncio.wait([command], timeout=ENDS_WITHIN_S)
        assert command in done, "the command stayed stopped after the resume"
        result = command.result()
        assert result.exit_code == 0
        assert "done" in result.output
    finally:
        let_go.set()
        command.cancel()
        await asyncio.gather(command, return_exceptions=True)
        for pid in processes_running(child):  # the old way's orphan: the test's own
            os.kill(pid, signal.SIGKILL)
        await sandbox.close()


async def test_a_fetch_step_cancelled_while_its_pipes_connect_is_killed_with_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a fetch step run unconfined (`--isolation none`), whose children (git's
    remote helper) hold its pipes as the shell's `sleep` does here."""
    from mlra.tools.fetch.box import FetchBox

    folder = tmp_path / "staging"
    folder.mkdir()
    box = FetchBox(folder, bwrap=None)
    let_go = _held_pipes(monkeypatch)
    script, child = _marked_sleep(120)
    step = asyncio.ensure_future(box.run(["bash", "-c", script], timeout_s=600))
    try:
        await _child_of_spawn(child)
        step.cancel()  # as its pipes connect: the spawn has not returned
        let_go.set()
        done, _ = await asyncio.wait([step], timeout=ENDS_WITHIN_S)
        assert step in done, "the cancelled step waited for its child's end"
        assert step.cancelled()
        assert not processes_running(child)
    finally:
        let_go.set()
        for pid in processes_running(child):  # the old way's orphan: the test's own
            os.kill(pid, signal.SIGKILL)
        await asyncio.gather(step, return_exceptions=True)
