"""The Docker sandbox against a real engine and a real image.

`docker/test-engine.sh` starts an engine of its own (no bridge, no iptables) and
builds the test image `mlra-test:latest` (Debian minbase with python3) locally;
`.ci/run` calls it. Without an engine these tests skip and say why. What every
sandbox must do alike is checked in test_sandbox_conformance.py (Docker included);
here, what is particular to a container: its limits, network, image, ownership of
the workspace, and the containers a run leaves behind.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.tools.sandbox.base import SandboxError, SandboxSpec
from mlra.tools.sandbox.host_copies import copy_out
from tests.conftest import TEST_IMAGE, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import answering_script, call, supervisor_answering, turn

CANARY = {"ANTHROPIC_API_KEY": "sk-ant-canary-d0c4e", "OPENAI_API_KEY": "sk-canary-openai-d0c4e"}


def _containers(client: Any, run_id: str) -> list[Any]:
    return client.containers.list(all=True, filters={"label": f"mlra.run={run_id}"})


def _sandbox(workspace: Path, run_id: str, **spec: Any) -> Any:
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    workspace.mkdir(parents=True, exist_ok=True)
    pids = spec.pop("pids_limit", 8192)
    return DockerSandbox(
        workspace, SandboxSpec(**spec), image=TEST_IMAGE, run_id=run_id, pids_limit=pids
    )


async def test_stop_processes_ends_a_daemon_that_left_its_session(
    tmp_path: Path, client: Any
) -> None:
    """What a submission relies on: no process in the container outlives stop_processes,
    so nothing can rewrite the artifact once it is frozen."""
    sandbox = _sandbox(tmp_path / "ws", "stop-test")
    await sandbox.start()
    try:
        await sandbox.exec(
            # Each beat is written whole and renamed into place: a reader never finds
            # the file empty between the shell's truncation and its write.
            ["sh", "-c", "setsid sh -c 'while :; do date +%s%N > beat.new; mv beat.new beat;"
             " sleep 0.05; done' "
             ">/dev/null 2>&1 < /dev/null & while [ ! -s beat ]; do sleep 0.05; done"],
            timeout=30,
        )  # fmt: skip
        beat = tmp_path / "ws" / "beat"
        assert beat.read_text().strip()  # the daemon writes, and outlived its command
        await sandbox.stop_processes()
        after = beat.read_text()
        # Nothing writes any more: the container itself has stopped.
        container = client.containers.get(sandbox.container.id)
        assert container.status == "exited"
        assert beat.read_text() == after
    finally:
        await sandbox.close()
    assert _containers(client, "stop-test") == []


async def test_limits_are_applied_inside_the_container(tmp_path: Path, client: Any) -> None:
    sandbox = _sandbox(tmp_path / "ws", "limits-test", memory_mb=200, cpus=0.5, pids_limit=64)
    await sandbox.start()
    try:
        read = await sandbox.exec(
            ["sh", "-c",
             "cd /sys/fs/cgroup;"
             "echo mem $(cat memory.max 2>/dev/null || cat memory/memory.limit_in_bytes);"
             "echo cpu $(cat cpu.max 2>/dev/null || cat cpu/cpu.cfs_quota_us);"
             "echo pids $(cat pids.max 2>/dev/null || cat pids/pids.max);"
             "echo uid $(id -u)"],
            timeout=20,
        )  # fmt: skip
        values = {line.split()[0]: line.split()[1] for line in read.output.splitlines()}
        memory, cpu, pids, uid = values["mem"], values["cpu"], values["pids"], values["uid"]
        assert int(memory) == 200 * 2**20
        assert cpu == "50000"  # half of a 100 ms period
        assert int(pids) == 64
        assert int(uid) != 0  # not root
        hog = await sandbox.exec(
            ["python3", "-c", "x = bytearray(400 * 2**20); print('survived')"], timeout=60
        )
        assert "survived" not in hog.output and hog.exit_code != 0  # killed by the memory limit
    finally:
        await sandbox.close()


async def test_no_network_and_no_api_key_inside(
    tmp_path: Path, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in CANARY.items():
        monkeypatch.setenv(name, value)
    sandbox = _sandbox(
        tmp_path / "ws", "env-test", env={"TASK_SETTING": "on", "HF_TOKEN": "hf_canary_d0c4e"}
    )
    notices = await sandbox.start()
    try:
        assert any("HF_TOKEN" in n for n in notices)
        env = await sandbox.exec(["sh", "-c", "env; cat /proc/1/environ"], timeout=20)
        assert "TASK_SETTING=on" in env.output and "HOME=" in env.output
        for secret in [*CANARY.values(), "hf_canary_d0c4e"]:
            assert secret not in env.output
        inspected = json.dumps(client.api.inspect_container(sandbox.container.id)["Config"])
        assert "canary" not in inspected
        net = await sandbox.exec(
            ["python3", "-c",
             "import socket\n"
             "ifs=[l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]\n"
             "print('interfaces', ifs)\n"
             "try:\n"
             "    socket.create_connection(('1.1.1.1', 53), timeout=3); print('connected')\n"
             "except OSError as e:\n"
             "    print('refused', e)\n"],
            timeout=30,
        )  # fmt: skip
        assert "interfaces ['lo']" in net.output
        assert "refused" in net.output and "connected" not in net.output
    finally:
        await sandbox.close()


async def test_the_workspace_is_shared_with_the_host(tmp_path: Path, client: Any) -> None:
    workspace = tmp_path / "ws"
    sandbox = _sandbox(workspace, "files-test")
    await sandbox.start()
    try:
        made = await sandbox.exec(
            ["sh", "-c", "mkdir -p out && echo from-container > out/result.txt"], timeout=20
        )
        assert made.exit_code == 0, made.output
        assert (workspace / "out" / "result.txt").read_text() == "from-container\n"
        # What the tools write host-side, the container's user can change.
        await sandbox.write_file("src/train.py", b"print('v1')\n")
        edit = await sandbox.exec(
            ["sh", "-c", "echo \"print('v2')\" >> src/train.py && python3 src/train.py"],
            timeout=20,
            cwd=".",
        )
        assert edit.exit_code == 0 and edit.output.split() == ["v1", "v2"], edit.output
        tree = {f.path for f in await sandbox.list_tree(".")}
        assert {"out", "out/result.txt", "src", "src/train.py"} <= tree
        assert await sandbox.read_file("/workspace/out/result.txt") == b"from-container\n"
        await copy_out(sandbox, "out", tmp_path / "copied")
        assert (tmp_path / "copied" / "result.txt").exists()
        in_sub = await sandbox.exec(["pwd"], timeout=20, cwd="src")
        assert in_sub.output.strip() == "/workspace/src"
    finally:
        await sandbox.close()
    assert _containers(client, "files-test") == []


async def test_a_tasks_read_only_file_is_read_only_in_the_container(
    tmp_path: Path, client: Any
) -> None:
    """`[files] read_only` (issue 17): the task's original is mounted over the workspace's
    copy read-only, so a write fails with the OS's error and the file stays as it was."""
    original = tmp_path / "task" / "bonus.txt"
    original.parent.mkdir()
    original.write_text("0\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "bonus.txt").write_text("0\n")
    sandbox = _sandbox(workspace, "ro-test", read_only_files={"bonus.txt": original})
    await sandbox.start()
    try:
        write = await sandbox.exec(["sh", "-c", "echo 5 > bonus.txt"], timeout=20)
        assert write.exit_code != 0 and "Read-only file system" in write.output, write.output
        read = await sandbox.exec(["sh", "-c", "cat bonus.txt; echo 42 > answer.txt"], timeout=20)
        assert read.exit_code == 0 and read.output.strip() == "0", read.output
    finally:
        await sandbox.close()
    assert original.read_text() == (workspace / "bonus.txt").read_text() == "0\n"
    assert (workspace / "answer.txt").read_text() == "42\n"


FLIPPER = """
import os, shutil, sys
out, n = sys.argv[1], 0
os.makedirs("real", exist_ok=True)
open("real/secret.txt", "w").write("decoy")
while not os.path.exists("stop"):
    try:
        os.rename("real", "flip")  # a real folder...
        os.rename("flip", "real")
        os.symlink(out, "flip")  # ...then a link to the host's folder
        os.unlink("flip")
    except OSError:  # mlra made flip a folder of its own: take it back
        if os.path.islink("flip"):
            os.unlink("flip")
        elif os.path.isdir("flip"):
            shutil.rmtree("real", ignore_errors=True)
            os.rename("flip", "real")
    n += 1
    if n % 20 == 0:
        open("flips.tmp", "w").write(str(n))
        os.replace("flips.tmp", "flips")
"""


async def test_a_daemon_flipping_a_folder_into_a_link_never_reaches_host_files(
    tmp_path: Path, client: Any
) -> None:
    """The race a security review found: a daemon left in the container turns a folder
    into a link to a host folder and back, while mlra (root here) reads, writes and
    chowns the workspace host-side. Nothing outside may be read, written or chowned."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret d0c4e")
    owner = (outside / "secret.txt").stat().st_uid
    workspace = tmp_path / "ws"
    sandbox = _sandbox(workspace, "flip-test")
    await sandbox.start()
    try:
        await sandbox.write_file(".flipper.py", FLIPPER.encode())
        started = await sandbox.exec(
            ["sh", "-c", f"setsid python3 .flipper.py {outside} >/dev/null 2>&1 </dev/null & "
             "while [ ! -s flips ]; do sleep 0.05; done"],
            timeout=60,
        )  # fmt: skip
        assert started.exit_code == 0, started.output
        before = int((workspace / "flips").read_text())
        outcomes: set[str] = set()
        # At least 1500 tries, and on until the daemon has flipped meanwhile (on a loaded
        # machine 1500 tries can end before it is scheduled again): the race was live.
        i, bound = 0, time.monotonic() + 120
        while i < 1500 or int((workspace / "flips").read_text()) <= before:
            assert time.monotonic() < bound, "the daemon stopped flipping"
            i += 1
            try:
                data = await sandbox.read_file("flip/secret.txt")
                outcomes.add(data.decode())
            except SandboxError as exc:
                outcomes.add("refused" if "outside the workspace" in str(exc) else "missing")
            if i % 10 == 0:
                with contextlib.suppress(SandboxError, OSError):
                    await sandbox.write_file("flip/planted.txt", b"planted")
            if i % 100 == 0:
                sandbox._own_workspace()
        assert "host secret d0c4e" not in outcomes, outcomes
        assert outcomes <= {"decoy", "refused", "missing"}
        (workspace / "stop").touch()
    finally:
        await sandbox.close()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "host secret d0c4e"
    assert (outside / "secret.txt").stat().st_uid == owner
    assert outside.stat().st_uid == owner


def test_handing_the_workspace_over_does_not_follow_links_out(tmp_path: Path) -> None:
    """What `_own_workspace` does as root before a container starts: chown the
    workspace to the container's user, links included, but never what they point to."""
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    if os.geteuid() != 0:
        pytest.skip("only root hands the workspace to another user")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("x")
    workspace = tmp_path / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "train.py").write_text("print(1)\n")
    (workspace / "src" / "up").symlink_to(outside)
    (workspace / "home").symlink_to(outside / "secret.txt")
    sandbox = DockerSandbox(workspace, SandboxSpec(), image=TEST_IMAGE, uid=4321)
    sandbox._own_workspace()
    assert (workspace / "src" / "train.py").stat().st_uid == 4321
    assert (workspace / "src" / "up").lstat().st_uid == 4321
    assert (workspace / "home").lstat().st_uid == 4321
    assert outside.stat().st_uid == 0 and (outside / "secret.txt").stat().st_uid == 0


async def test_the_resources_pane_sees_the_container_through_its_sandbox(
    tmp_path: Path, client: Any
) -> None:
    from mlra.agent.loop.resources import ResourceMonitor

    sandbox = _sandbox(tmp_path / "ws", "usage-test", memory_mb=300, cpus=0.5)
    assert sandbox.usage() is None  # no container yet
    await sandbox.start()
    try:
        usage = sandbox.usage()
        assert usage is not None and usage.gpu_ids == [] and usage.cpus == 0.5
        assert usage.mem_limit_mb == 300 and usage.mem_used_mb is not None
        sample = ResourceMonitor(sandbox.workspace, sandbox=sandbox).sample()
        assert sample.ram_total_mb <= 300  # the container's memory, not the host's
        assert sample.gpus == [] and sample.gpu_error is not None
    finally:
        await sandbox.close()
    assert sandbox.usage() is None


def _run_args(tmp_path: Path, task: Path, server: ScriptedModelServer, *extra: str) -> list[str]:
    return [
        "run", str(task), "--model", "openai/test-model",
        "--base-url", server.url_for("openai"),  # type: ignore[list-item]
        "--no-tui", "--runs-dir", str(tmp_path / "runs"),
        "--sandbox", "docker", "--image", TEST_IMAGE, *extra,
    ]  # fmt: skip


def test_a_scripted_run_in_a_container(
    tmp_path: Path, answer_task: Path, client: Any, docker_host: str
) -> None:
    with ScriptedModelServer(answering_script()) as server:
        proc = mlra_cli(
            _run_args(tmp_path, answer_task, server, "--run-id", "docker-e2e", "--memory", "512m"),
            cwd=tmp_path,
            env={**CANARY, "DOCKER_HOST": docker_host},
            timeout=180,
        )
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "runs" / "docker-e2e"
    events = read_events(run_dir / "events.jsonl")
    started = events[0]
    assert isinstance(started, ev.RunStarted) and started.sandbox.kind == "docker"
    assert started.sandbox.workdir == "/workspace" and not started.sandbox.network
    # Which engine confined it, and its version, as the engine gives it.
    engine = client.version()["Version"]
    assert (started.sandbox.isolated_by, started.sandbox.isolated_by_version) == (
        docker_host,
        engine,
    )
    assert f"sandbox docker (docker {engine} at {docker_host}, " in proc.stdout
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "finished" and result["score"] == 1.0
    assert (result["isolated_by"], result["isolated_by_version"]) == (docker_host, engine)
    assert (run_dir / "workspace" / "answer.txt").read_text().strip() == "42"
    env_result = next(
        e for e in events if isinstance(e, ev.ToolResult) and e.tool == "bash" and e.ok
    )
    assert "HOME=/tmp/home" in env_result.output and "HOSTNAME=sandbox" in env_result.output
    for secret in CANARY.values():
        assert secret not in env_result.output
    samples = [e for e in events if isinstance(e, ev.ResourceSample)]
    assert all(s.ram_total_mb <= 512 for s in samples)  # the container's memory, not the host's
    assert _containers(client, "docker-e2e") == []


HOLDER = (
    'python3 -c "import glob, os, time\n'
    "for p in glob.glob('/proc/[0-9]*/fd/0'):\n"
    "    try: os.open(p, os.O_WRONLY | os.O_NONBLOCK)\n"
    "    except OSError: pass\n"
    'time.sleep(293.5)"'
)
"""A long command that first opens every stdin it can reach in the container for writing:
had it reached the main process's (the tie, docker_tie.py), it would hold it open."""


def _running(client: Any, run_id: str) -> list[Any]:
    return client.containers.list(filters={"label": f"mlra.run={run_id}"})


def _host_pids_running(marker: str) -> list[int]:
    """This machine's processes whose command line holds `marker` (the container's too:
    the test engine is local)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if marker.encode() in cmdline.read_bytes() and int(cmdline.parent.name) != os.getpid():
                found.append(int(cmdline.parent.name))
    return found


def test_a_killed_consoles_container_ends_with_it(
    tmp_path: Path, answer_task: Path, client: Any, docker_host: str
) -> None:
    """A console killed outright (SIGKILL: no close) left its container running, its
    command with it, holding the GPUs, CPUs and memory until the next mlra start removed
    it. The container now ends when its mlra dies, however its command tries to keep it;
    the next start removes what is left of it (a stopped container)."""
    from mlra.tools.sandbox.docker_sandbox import remove_leftover_containers

    script = {
        "supervisor": supervisor_answering(),
        "worker": [turn("Train for long.", call("bash", command=HOLDER, timeout=600))],
    }
    run_dir = tmp_path / "runs" / "docker-killed"
    with ScriptedModelServer(script) as server:
        env = {k: v for k, v in os.environ.items() if k not in CANARY}
        env["DOCKER_HOST"] = docker_host
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlra",
             *_run_args(tmp_path, answer_task, server, "--run-id", "docker-killed")],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                log = run_dir / "events.jsonl"
                if log.exists() and "293.5" in log.read_text():
                    containers = _running(client, "docker-killed")
                    if containers and "time.sleep(293.5)" in json.dumps(containers[0].top()):
                        break
                time.sleep(0.1)
            else:
                pytest.fail(f"the command never ran: {proc.stderr.read() if proc.stderr else ''}")
            assert _host_pids_running("time.sleep(293.5)")
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
    try:  # the engine's own word that it ended (a second; 60 bounds a failure only)
        for container in containers:
            container.wait(timeout=60)
        assert _running(client, "docker-killed") == []
        assert _host_pids_running("time.sleep(293.5)") == []  # its command with it
    finally:
        for left in _running(client, "docker-killed"):
            left.remove(force=True)
    # Stopped, not removed: the next start removes it, with its stdin folder and volume.
    assert "docker-killed" in remove_leftover_containers()
    assert _containers(client, "docker-killed") == []


async def test_a_closed_sandbox_removes_its_tied_container(
    tmp_path: Path, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tie held through the sandbox's life (commands run, the container stays up,
    the tie's keepalive newlines ignored by its keeper) and a close removes the container
    as before, without a word of being untied."""
    from mlra.tools.sandbox import docker_tie

    monkeypatch.setattr(docker_tie, "KEEPALIVE_S", 0.02)
    sandbox = _sandbox(tmp_path / "ws", "docker-tied-close")
    notices = await sandbox.start()
    try:
        assert not any("tied" in n for n in notices), notices
        for _ in range(3):
            result = await sandbox.exec(["sh", "-c", "echo hi"], timeout=60)
            assert result.exit_code == 0 and result.output.strip() == "hi"
        gc.collect()  # nothing the docker client left to collect lets the tie go
        result = await sandbox.exec(["sh", "-c", "echo hi"], timeout=60)
        (container,) = _containers(client, "docker-tied-close")
        assert container.status == "running" and result.exit_code == 0
        assert container.attrs["Config"]["StdinOnce"] and container.attrs["Config"]["OpenStdin"]
    finally:
        await sandbox.close()
    assert _containers(client, "docker-tied-close") == []


async def test_an_untied_container_runs_and_says_so_once(
    tmp_path: Path, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the engine refuses the attach, the run goes on, its container untied, and
    its start says so once."""
    import docker.errors
    import docker.models.containers

    def refused(self: Any, **kwargs: Any) -> Any:
        raise docker.errors.APIError("attach refused for the test")

    monkeypatch.setattr(docker.models.containers.Container, "attach_socket", refused)
    sandbox = _sandbox(tmp_path / "ws", "docker-untied")
    notices = await sandbox.start()
    try:
        untied = [n for n in notices if "could not be tied to mlra" in n]
        assert len(untied) == 1 and "attach refused for the test" in untied[0], notices
        result = await sandbox.exec(["sh", "-c", "echo hi"], timeout=60)
        assert result.exit_code == 0 and result.output.strip() == "hi"
    finally:
        await sandbox.close()
    assert _containers(client, "docker-untied") == []


async def test_an_attach_that_is_no_socket_is_held_and_the_container_runs_on(
    tmp_path: Path, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attach made but not a plain socket of mlra's (an ssh:// engine's channel) was
    closed at once, or dropped (set_inheritable refused): the engine closed the
    container's stdin (StdinOnce), the container ended, and the agent's next command
    got `409 Conflict ... is not running`. It is held till the close: the run is told
    its container may outlive mlra, and its commands run."""
    from mlra.tools.sandbox import docker_tie

    monkeypatch.setattr(docker_tie, "_socket_of", lambda handle: None)
    sandbox = _sandbox(tmp_path / "ws", "docker-no-socket")
    notices = await sandbox.start()
    try:
        untied = [n for n in notices if "could not be tied to mlra" in n]
        assert len(untied) == 1 and "not a socket" in untied[0], notices
        gc.collect()  # a handle no one held would be closed now
        (container,) = _containers(client, "docker-no-socket")
        for _ in range(2):
            result = await sandbox.exec(["sh", "-c", "echo hi"], timeout=60)
            assert result.exit_code == 0 and result.output.strip() == "hi", result.output
        container.reload()
        assert container.status == "running"
    finally:
        await sandbox.close()
    assert _containers(client, "docker-no-socket") == []


async def test_a_tie_closed_while_mlra_runs_says_so_to_the_next_command(
    tmp_path: Path, client: Any
) -> None:
    """A tie closed while mlra lived (an engine restart, a proxy's idle timeout) ended the
    container, and the agent's next command got a bare `409 Conflict ... is not running`:
    it is told the container ended because its tie to mlra was closed."""
    from mlra.tools.sandbox.base import SandboxError

    sandbox = _sandbox(tmp_path / "ws", "docker-tie-closed")
    await sandbox.start()
    try:
        (container,) = _containers(client, "docker-tie-closed")
        assert sandbox._tie is not None and sandbox._tie._sock is not None
        sandbox._tie._sock.shutdown(socket.SHUT_RDWR)  # as a proxy closing it would
        assert container.wait(timeout=60)["StatusCode"] == 0
        with pytest.raises(SandboxError) as failed:
            await sandbox.exec(["sh", "-c", "echo hi"], timeout=60)
        assert "its tie to mlra was closed" in str(failed.value), failed.value
        assert "409" not in str(failed.value)
    finally:
        await sandbox.close()
    assert _containers(client, "docker-tie-closed") == []


async def test_a_command_running_when_its_tie_closes_is_told_why_it_was_killed(
    tmp_path: Path, client: Any
) -> None:
    """A tie closed under a running command ends the container, and the command with it:
    it got a bare exit 137. Its output now ends with a note that the tie was closed."""
    import asyncio

    sandbox = _sandbox(tmp_path / "ws", "docker-tie-closed-running")
    await sandbox.start()
    started = asyncio.Event()
    try:
        killed = await sandbox.exec(["sh", "-c", "kill -9 $$"], timeout=60)
        assert killed.exit_code == 137 and killed.notes == [], killed  # its container runs
        running = asyncio.ensure_future(
            sandbox.exec(
                ["sh", "-c", "echo started; sleep 600"],
                timeout=300,
                on_output=lambda _stream, text: "started" in text and started.set(),
            )
        )
        await asyncio.wait_for(started.wait(), 60)
        assert sandbox._tie is not None and sandbox._tie._sock is not None
        sandbox._tie._sock.shutdown(socket.SHUT_RDWR)  # as a proxy closing it would
        result = await asyncio.wait_for(running, 120)
        assert result.exit_code == 137, result
        assert "its tie to mlra was closed" in result.output, result.output
        assert any("its tie to mlra was closed" in n for n in result.notes), result.notes
    finally:
        await sandbox.close()
    assert _containers(client, "docker-tie-closed-running") == []


async def test_a_tie_closed_after_a_command_killed_for_memory_still_says_so(
    tmp_path: Path, client: Any
) -> None:
    """Once a command had been killed for memory the engine shows the container
    OOMKilled for ever, and a tie closed later got the bare "the container has ended
    (exit status 0)": the keeper's exit 0 (it read its stdin's end) is what tells."""
    from mlra.tools.sandbox.base import SandboxError

    sandbox = _sandbox(tmp_path / "ws", "docker-tie-oom", memory_mb=128)
    await sandbox.start()
    try:
        hog = "x = bytearray(512 * 1024 * 1024); x[::4096] = b'1' * len(x[::4096])"
        result = await sandbox.exec(["python3", "-c", hog], timeout=120)
        assert result.exit_code == 137, result
        (container,) = _containers(client, "docker-tie-oom")
        assert sandbox._tie is not None
        sandbox._tie.release()  # as a proxy closing it would
        assert container.wait(timeout=60)["StatusCode"] == 0
        with pytest.raises(SandboxError) as failed:
            await sandbox.exec(["sh", "-c", "echo hi"], timeout=60)
        assert "its tie to mlra was closed" in str(failed.value), failed.value
    finally:
        await sandbox.close()
    assert _containers(client, "docker-tie-oom") == []


async def test_a_tied_container_removed_under_its_sandbox_breaks_nothing(
    tmp_path: Path, client: Any
) -> None:
    """Another mlra (its start's leftover removal) or a person removed the container while
    its sandbox lived: the close goes on as for a container already gone."""
    sandbox = _sandbox(tmp_path / "ws", "docker-tied-gone")
    await sandbox.start()
    try:
        for container in _containers(client, "docker-tied-gone"):
            container.remove(force=True)
    finally:
        await sandbox.close()
    assert _containers(client, "docker-tied-gone") == []


def test_clear_errors_before_any_run_folder(
    tmp_path: Path, answer_task: Path, docker_host: str
) -> None:
    with ScriptedModelServer(answering_script()) as server:
        missing = mlra_cli(
            [*_run_args(tmp_path, answer_task, server)[:-1], "mlra-no-such-image:1"],
            cwd=tmp_path,
            env={"DOCKER_HOST": docker_host},
        )
        no_gpu_runtime = mlra_cli(
            [*_run_args(tmp_path, answer_task, server), "--gpus", "all"],
            cwd=tmp_path,
            env={"DOCKER_HOST": docker_host},
        )
        no_engine = mlra_cli(
            _run_args(tmp_path, answer_task, server),
            cwd=tmp_path,
            env={"DOCKER_HOST": f"unix://{tmp_path}/nothing.sock"},
        )
    assert (
        missing.returncode == 2 and "mlra-no-such-image:1 is not on this engine" in missing.stderr
    )
    assert no_gpu_runtime.returncode == 2 and "no GPU runtime" in no_gpu_runtime.stderr
    assert no_engine.returncode == 2 and "cannot reach the Docker engine" in no_engine.stderr
    for proc in (missing, no_gpu_runtime, no_engine):
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "runs").exists()


def test_image_build_says_why_it_cannot_build(tmp_path: Path, docker_host: str) -> None:
    no_engine = mlra_cli(
        ["image", "build"], cwd=tmp_path, env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    )
    assert no_engine.returncode == 2
    assert no_engine.stderr.startswith("mlra: cannot reach the Docker engine")
    # The engine is here but no registry is: the CUDA base image cannot be pulled.
    offline = mlra_cli(["image", "build", "--tag", "mlra-build-test:1"], cwd=tmp_path,
                       env={"DOCKER_HOST": docker_host}, timeout=120)  # fmt: skip
    if offline.returncode == 0:
        pytest.skip("a registry is reachable here: the real image was built")
    assert offline.returncode == 1
    assert "building mlra-build-test:1 failed" in offline.stderr
    assert "nvidia/cuda" in offline.stdout  # the Dockerfile's base image
