"""One behaviour, every sandbox: the same tests against local-none, bubblewrap and Docker.

The tools and the agent never know which sandbox they have, so what a command
sees (streamed output, exit codes, stdin, its folder, its time-out, its death
with everything it started, a pause) and what the file tools may reach must be
the same in each. A sandbox that cannot be had here skips, saying why; what is
particular to one sandbox (bubblewrap's privileges and limits, Docker's image,
GPUs and containers) stays in its own test file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mlra.tools.sandbox.base import Sandbox, SandboxError, SandboxSpec, Stream
from mlra.tools.sandbox.bwrap import isolation_problem
from mlra.tools.sandbox.local import LocalSandbox
from mlra.tools.sandbox.time_out import TimeOut
from tests.conftest import TEST_IMAGE, Chunks, docker_address, docker_problem

BWRAP_PROBLEM = isolation_problem()
KINDS = [
    "none",
    pytest.param(
        "bwrap", marks=pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=BWRAP_PROBLEM or "")
    ),
    "docker",
]


def _docker_host() -> str:
    """The engine's address; skips the test, saying why, where there is none to use."""
    problem = docker_problem()
    if problem is not None:
        pytest.skip(problem)
    host = docker_address()
    assert host is not None
    return host


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws.resolve()


@pytest.fixture(params=KINDS)
async def sandbox(
    request: pytest.FixtureRequest, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Sandbox]:
    kind: str = request.param
    sb: Sandbox
    if kind == "docker":
        monkeypatch.setenv("DOCKER_HOST", _docker_host())
        from mlra.tools.sandbox.docker_sandbox import DockerSandbox

        run_id = f"conformance-{secrets.token_hex(3)}"
        sb = DockerSandbox(workspace, SandboxSpec(), image=TEST_IMAGE, run_id=run_id)
    else:
        sb = LocalSandbox(
            workspace, SandboxSpec(), isolation_mode="bwrap" if kind == "bwrap" else "none"
        )
    await sb.start()
    assert sb.isolation == kind
    yield sb
    await sb.close()


async def sh(sb: Sandbox, script: str, limit_s: float = 30) -> tuple[int | None, str]:
    result = await sb.exec(["bash", "-c", script], timeout=limit_s)
    return result.exit_code, result.output


async def open_gate(fifo: Path, data: str = "go\n") -> None:
    """Let a command waiting on `read < fifo` go on; blocks until it has the fifo open."""

    def write() -> None:
        with open(fifo, "w") as f:
            f.write(data)

    await asyncio.to_thread(write)


def processes_with(token: str) -> list[int]:
    """Live (not zombie) processes whose command line holds `token`: the host sees
    those of every sandbox, a container's included."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and _state(int(entry)) not in "ZX":
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if token.encode() in cmdline:
                pids.append(int(entry))
    return pids


def _state(pid: int) -> str:
    """The process's state letter (R, S, T...), X if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return "X"
    return stat[stat.rfind(b")") + 2 :].split()[0].decode()


def _alive(pid: int) -> bool:
    return _state(pid) not in "ZX"


async def _until(check: object, what: str, limit_s: float = 10) -> None:
    """Wait until `check()` holds: a signal sent through an engine arrives a moment later."""
    assert callable(check)
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, f"still not {what} after {limit_s} s"
        await asyncio.sleep(0.02)


# --- streaming and results -----------------------------------------------------------------


async def test_output_streams_in_arrival_order(sandbox: Sandbox, workspace: Path) -> None:
    os.mkfifo(workspace / "gate")
    chunks = Chunks()
    task = asyncio.create_task(
        sandbox.exec(
            ["bash", "-c", "echo out1; echo err1 >&2; read line < gate; echo out2 $line"],
            timeout=30,
            on_output=chunks,
        )
    )
    await chunks.wait_for("out1", "stdout")
    await chunks.wait_for("err1", "stderr")
    assert not task.done()  # the first output arrived while the command still ran
    await open_gate(workspace / "gate")
    result = await task
    assert result.exit_code == 0
    assert chunks.text("stdout") == "out1\nout2 go\n"
    assert chunks.text("stderr") == "err1\n"
    assert result.output == chunks.text()  # interleaved exactly as it arrived
    assert result.output.endswith("out2 go\n")


async def test_multibyte_character_split_across_reads(sandbox: Sandbox, workspace: Path) -> None:
    os.mkfifo(workspace / "gate")
    chunks = Chunks()
    task = asyncio.create_task(
        sandbox.exec(
            ["bash", "-c", r"printf '\xc3'; read line < gate; printf '\xa9\n'"],
            timeout=30,
            on_output=chunks,
        )
    )
    await open_gate(workspace / "gate")
    result = await task
    assert result.output == "é\n"
    assert all("\ufffd" not in text for _, text in chunks.items)


async def test_exit_code_stdin_and_cwd(sandbox: Sandbox, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    result = await sandbox.exec(
        ["bash", "-c", "cat; pwd; exit 3"], timeout=30, stdin=b"fed\n", cwd="sub"
    )
    assert result.exit_code == 3
    assert not result.timed_out
    assert result.output == f"fed\n{sandbox.workdir}/sub\n"
    fed = await sandbox.exec(["python3", "-"], timeout=30, stdin=b"print(6 * 7)")
    assert fed.exit_code == 0 and fed.output.strip() == "42"
    with pytest.raises(SandboxError, match="outside the workspace"):
        await sandbox.exec(["true"], timeout=30, cwd="..")


async def test_huge_output_stays_bounded(sandbox: Sandbox) -> None:
    total = 0

    def count(stream: Stream, text: str) -> None:
        nonlocal total
        total += len(text)

    result = await sandbox.exec(
        ["bash", "-c", "yes | head -c 20000000"], timeout=60, on_output=count
    )
    assert result.exit_code == 0
    assert total == 20_000_000  # the stream passes everything on
    assert len(result.output) < 600_000  # what is kept is the head and the tail
    assert result.output.startswith("y\ny\n")
    assert result.output.endswith("y\ny\n")
    assert "characters (" in result.output and "cut here" in result.output


# --- killing -------------------------------------------------------------------------------


async def test_timeout_kills_the_process_group(sandbox: Sandbox) -> None:
    token = f"300.{secrets.randbelow(10**6):06d}"
    chunks = Chunks()
    started = time.monotonic()
    task = asyncio.create_task(
        sandbox.exec(
            ["bash", "-c", f"sleep {token} & echo started; sleep {token}"],
            timeout=1.0,
            on_output=chunks,
        )
    )
    await chunks.wait_for("started")  # streamed while it ran
    pids = processes_with(token)
    assert len(pids) >= 2  # its background child and the foreground sleep
    result = await task
    assert result.timed_out and result.killed and result.exit_code != 0
    assert 0.9 < result.duration_s < 10 and time.monotonic() - started < 10
    assert [pid for pid in pids if _alive(pid)] == []  # the background job died with it


async def test_a_time_out_raised_while_the_command_runs_lets_it_run_past_the_first(
    sandbox: Sandbox,
) -> None:
    """Its run's deadline moved (a search's attempt given more time): the command, bound by
    the old one, runs on to the new rather than being killed at the old."""
    limit = TimeOut(3.0, wanted=60)

    def raised_once_begun(stream: Stream, text: str) -> None:
        if "begun" in text:
            limit.raise_by(10)

    result = await sandbox.exec(
        ["bash", "-c", "echo begun; sleep 4; echo done"], timeout=limit, on_output=raised_once_begun
    )
    assert result.exit_code == 0 and not result.timed_out, result.output
    assert result.output == "begun\ndone\n" and result.duration_s > 3.0
    assert limit.seconds == 13.0 and limit.bound


async def test_cancelling_exec_kills_the_process_group(sandbox: Sandbox) -> None:
    token = f"300.{secrets.randbelow(10**6):06d}"
    chunks = Chunks()
    task = asyncio.create_task(
        sandbox.exec(
            ["bash", "-c", f"sleep {token} & echo started; sleep {token}"],
            timeout=120,
            on_output=chunks,
        )
    )
    await chunks.wait_for("started")
    pids = processes_with(token)
    assert pids
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _until(lambda: not any(_alive(pid) for pid in pids), "dead")


async def test_background_processes_end_with_the_command(sandbox: Sandbox) -> None:
    """A background job holding the output pipes neither keeps exec waiting nor survives."""
    token = f"300.{secrets.randbelow(10**6):06d}"
    result = await sandbox.exec(["bash", "-c", f"sleep {token} & echo started"], timeout=60)
    assert result.exit_code == 0 and not result.timed_out
    assert result.output == "started\n"
    assert result.duration_s < 10
    assert processes_with(token) == []


async def test_stop_processes_leaves_nothing_of_the_run(sandbox: Sandbox) -> None:
    """A daemon that left its command's session cannot outlive the submission."""
    token = f"4343.{secrets.randbelow(10**6):06d}"
    code, _ = await sh(sandbox, f"setsid sleep {token} > /dev/null 2>&1 < /dev/null & echo started")
    assert code == 0
    if sandbox.isolation == "bwrap":
        # Its own pid namespace ended with the command, and everything in it (killed
        # by the kernel as the namespace ends: gone a moment after the command returns).
        await _until(lambda: processes_with(token) == [], "gone with the namespace")
    await sandbox.stop_processes()
    assert processes_with(token) == []


# --- pausing -------------------------------------------------------------------------------


async def test_suspended_commands_stop_and_their_time_out_waits(
    sandbox: Sandbox, workspace: Path
) -> None:
    """A paused run suspends its commands: they make no progress, and the time
    spent suspended does not count against their time-out."""
    token = f"0.04{secrets.randbelow(10**6):06d}"  # seconds, and a name to find it by
    seen: list[str] = []
    first = asyncio.Event()

    def on_output(stream: str, text: str) -> None:
        seen.append(text)
        first.set()

    script = f"for i in $(seq 0 29); do echo $i; echo $i > count; sleep {token}; done"
    task = asyncio.create_task(
        sandbox.exec(["bash", "-c", script], timeout=2.5, on_output=on_output)
    )
    await first.wait()
    sandbox.suspend_commands()

    def stopped() -> bool:
        """The loop itself (bash) is stopped: a Docker exec's own process, which only waits
        on its command, is left running, and a sleep may have ended as the stop came."""
        for pid in processes_with(token):
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{pid}/stat").read_text()
                name = stat[stat.find("(") + 1 : stat.rfind(")")]
                if name == "bash" and _state(pid) == "T":
                    return True
        return False

    def count() -> str:
        # What the loop itself wrote last: its output may still be on its way through
        # the pipe (a reading of that after a fixed wait failed on a loaded machine).
        try:
            return (workspace / "count").read_text()
        except FileNotFoundError:
            return ""  # stopped before its first count

    await _until(stopped, "stopped (SIGSTOP)")
    frozen = count()
    # Long enough to make progress, and most of the time-out, if not stopped.
    await asyncio.sleep(1.5)
    assert count() == frozen
    sandbox.resume_commands()
    result = await task
    assert not result.timed_out and result.exit_code == 0
    assert "29" in result.output


async def test_usage_is_the_hosts_or_the_sandboxs_own(sandbox: Sandbox) -> None:
    """Local commands share the host's figures (None); a container has its own."""
    usage = sandbox.usage()
    if sandbox.isolation == "docker":
        assert usage is not None and usage.gpu_ids == []
    else:
        assert usage is None


# --- files ---------------------------------------------------------------------------------


async def test_files_are_read_written_and_listed(sandbox: Sandbox, workspace: Path) -> None:
    rel = await sandbox.write_file("src/train.py", b"print('v1')\n")
    assert rel == "src/train.py"
    edit = await sandbox.exec(
        ["bash", "-c", "echo \"print('v2')\" >> src/train.py && python3 src/train.py"],
        timeout=30,
    )
    assert edit.exit_code == 0 and edit.output.split() == ["v1", "v2"], edit.output
    made = await sandbox.exec(["bash", "-c", "mkdir -p out && echo made > out/r.txt"], timeout=30)
    assert made.exit_code == 0, made.output
    assert (workspace / "out" / "r.txt").read_text() == "made\n"
    assert await sandbox.read_file(f"{sandbox.workdir}/out/r.txt") == b"made\n"
    tree = {f.path for f in await sandbox.list_tree(".")}
    assert {"out", "out/r.txt", "src", "src/train.py"} <= tree
    with pytest.raises(SandboxError, match="no such file"):
        await sandbox.read_file("missing.txt")


async def test_paths_are_confined_to_the_workspace(
    sandbox: Sandbox, workspace: Path, tmp_path: Path
) -> None:
    (tmp_path / "secret.txt").write_text("no")
    (workspace / "link").symlink_to(tmp_path)
    (workspace / "ok.txt").write_text("yes")
    for path in ("../secret.txt", str(tmp_path / "secret.txt"), "/etc/passwd", "link/secret.txt"):
        with pytest.raises(SandboxError, match="outside the workspace"):
            await sandbox.read_file(path)
    with pytest.raises(SandboxError, match="outside the workspace"):
        await sandbox.write_file("link/new.txt", b"x")
    assert await sandbox.read_file(f"{sandbox.workdir}/ok.txt") == b"yes"
    assert not (tmp_path / "new.txt").exists()


async def test_a_daemon_that_left_the_session_dies_with_the_command_at_its_time_out(
    sandbox: Sandbox,
) -> None:
    """A daemon started with setsid leaves the command's session: the time-out kills it
    with the command all the same (in Docker it ran on until the run's end)."""
    token = f"300.{secrets.randbelow(10**6):06d}"
    try:
        result = await sandbox.exec(
            ["bash", "-c", f"setsid sleep {token} & echo started; sleep {token}"], timeout=1.0
        )
        assert result.timed_out
        assert result.output.startswith("started\n")
        assert result.duration_s < 10, result.duration_s
        # Killed with the command, as a background job is, in every sandbox.
        await _until(lambda: not any(_alive(pid) for pid in processes_with(token)), "dead")
    finally:
        for pid in processes_with(token):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
