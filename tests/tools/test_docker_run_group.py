"""A Docker run's containers under one run-level cgroup (tools/sandbox/docker_run_group.py),
against the real test engine (as test_docker_sandbox.py): each container keeps its own
limits, and the run's limit holds their total where their shares add up to more, as
the local sandbox's run group does (test_run_group_limits.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tools.test_docker_sandbox import _containers, _sandbox

HOG = "x = b'x' * (200 * 2**20); print('kept', len(x))"


def _groups_named(name: str) -> list[Path]:
    from mlra.tools.sandbox.docker_run_group import _hierarchies

    return [h / name for h in _hierarchies() if (h / name).exists()]


@pytest.fixture
def run_group(docker_host: str) -> Iterator[Any]:
    from mlra.tools.sandbox.docker_run_group import DockerRunGroup

    group = DockerRunGroup(memory_mb=64, pids=32, cpus=None)
    if group.setup() == "none":
        pytest.skip(f"the run's group cannot hold the engine's containers: {group.not_held}")
    yield group
    group.close()


async def test_containers_over_subscribed_are_held_to_the_runs_memory(
    tmp_path: Path,
    run_group: Any,
    client: Any,
) -> None:
    """The run's own container and an attempt's may have 1 GB each; the run has 64 MB:
    the kernel kills the attempt's 200 MB hog, the agent is told it may be the run's
    limit, and both containers go on."""
    own = _sandbox(tmp_path / "run" / "workspace", "docker-group", memory_mb=1024,
                   run_group=run_group)  # fmt: skip
    attempt = _sandbox(tmp_path / "run" / "attempts" / "a1" / "workspace", "docker-group/a1",
                       memory_mb=1024, run_group=run_group)  # fmt: skip
    await own.start()
    await attempt.start()
    try:
        for sandbox in (own, attempt):
            assert run_group.holds(sandbox.container.id)
            assert sandbox.limits.memory_mb == 1024  # its own limit, as it was
        hog = await attempt.exec(["python3", "-c", HOG], timeout=60)
        assert hog.exit_code != 0 and "kept" not in hog.output
        assert "the run's, shared by all its sandboxes" in hog.output, hog.output
        ok = await own.exec(["python3", "-c", "print('fine')"], timeout=60)
        assert (ok.exit_code, ok.output) == (0, "fine\n")
        again = await attempt.exec(["echo", "still-here"], timeout=60)
        assert again.output == "still-here\n"
        memory, processes = run_group.usage()
        assert memory is not None and processes is not None and processes >= 2
    finally:
        await attempt.close()
        await own.close()
    assert _containers(client, "docker-group") == []


async def test_the_runs_process_limit_holds_a_container_allowed_more(
    tmp_path: Path, run_group: Any
) -> None:
    """A container allowed 4,096 processes under a run of 32 cannot start 100."""
    sandbox = _sandbox(tmp_path / "ws", "docker-group-pids", pids_limit=4096, run_group=run_group)
    await sandbox.start()
    try:
        many = "for i in $(seq 100); do sleep 5 & done 2>&1; wait; echo done"
        result = await sandbox.exec(["bash", "-c", many], timeout=60)
        assert "Resource temporarily unavailable" in result.output, result.output
    finally:
        await sandbox.close()


async def test_the_runs_groups_go_at_its_end_in_every_hierarchy(
    tmp_path: Path,
    docker_host: str,
) -> None:
    """The engine makes a container's group under the parent in every hierarchy it
    mounts (blkio, cpuset, devices...), not only those mlra limits: all go with the run."""
    from mlra.tools.sandbox.docker_run_group import DockerRunGroup

    group = DockerRunGroup(memory_mb=64, pids=32, cpus=0.5)
    if group.setup() == "none":
        pytest.skip(f"the run's group cannot hold the engine's containers: {group.not_held}")
    sandbox = _sandbox(tmp_path / "ws", "docker-group-end", run_group=group)
    try:
        await sandbox.start()
        made = _groups_named(group.name)
        assert len(made) > 3, made  # memory, pids, cpu, and the engine's
        assert all((g / sandbox.container.id).is_dir() for g in made)
    finally:
        await sandbox.close()
        group.close()
    assert _groups_named(group.name) == []


KILLED = """
import asyncio, sys
from pathlib import Path
from mlra.tools.sandbox.docker_run_group import DockerRunGroup
from tests.tools.test_docker_run_group import _sandbox

async def main():
    group = DockerRunGroup(memory_mb=64, pids=32, cpus=None)
    group.setup()
    sandbox = _sandbox(Path(sys.argv[1]), "docker-group-killed", run_group=group)
    await sandbox.start()
    print(group.name, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_a_killed_mlras_container_and_groups_go_with_the_next_docker_run(
    tmp_path: Path,
    client: Any,
    run_group: Any,
) -> None:
    """A killed mlra removes neither its container nor its groups; the next one that
    makes a Docker run's group removes both (the container first: a group with a
    container in it cannot be removed)."""
    from mlra.tools.sandbox.docker_run_group import DockerRunGroup

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(tmp_path / "ws")],
        cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        name = proc.stdout.readline().strip()
        assert name.startswith(f"mlra-{proc.pid}-run-"), proc.stderr.read() if proc.stderr else ""
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert len(_containers(client, "docker-group-killed")) == 1
    assert _groups_named(name)
    following = DockerRunGroup(memory_mb=64, pids=32, cpus=None)
    assert following.setup() != "none"
    following.close()
    assert _containers(client, "docker-group-killed") == []
    assert _groups_named(name) == []


def _forward(listener: socket.socket, unix_path: str) -> None:
    """Relay each TCP connection to the engine's unix socket: the same engine, reached
    as a remote one is."""

    def pipe(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)

    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        engine = socket.socket(socket.AF_UNIX)
        engine.connect(unix_path)
        for a, b in ((conn, engine), (engine, conn)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()


async def test_an_engine_reached_over_the_network_is_said_not_held(
    tmp_path: Path,
    docker_host: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An engine at tcp:// makes its containers' groups in its own machine's tree: the
    run says its total is not held and why, and its containers keep their own limits."""
    from mlra.tools.sandbox.docker_run_group import DockerRunGroup

    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(
        target=_forward, args=(listener, docker_host[len("unix://") :]), daemon=True
    ).start()
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{listener.getsockname()[1]}")
    group = DockerRunGroup(memory_mb=64, pids=32, cpus=None)
    try:
        assert group.setup() == "none" and group.cgroup_parent is None
        assert group.not_held is not None
        assert "reached at tcp://127.0.0.1:" in group.not_held, group.not_held
        sandbox = _sandbox(tmp_path / "ws", "docker-group-remote", memory_mb=128,
                           run_group=group)  # fmt: skip
        await sandbox.start()
        try:
            hog = await sandbox.exec(["python3", "-c", HOG], timeout=60)
            assert "the sandbox's memory limit of 128 MB was exceeded" in hog.output, hog.output
            assert "the run's" not in hog.output
        finally:
            await sandbox.close()
    finally:
        listener.close()
        group.close()


@pytest.mark.slow
def test_a_docker_searchs_containers_all_sit_under_the_runs_group(
    tmp_path: Path,
    answer_task: Path,
    client: Any,
    docker_host: str,
) -> None:
    """`mlra run --sandbox docker --search`: the run's own container and both attempts'
    are started under one group, `run_started` says it holds the run's total, and the
    group is gone, in every hierarchy, when the run ends."""
    from mlra import events as ev
    from mlra.agent.record.eventlog import read_events
    from mlra.tools.sandbox.docker_preflight import docker_client
    from mlra.tools.sandbox.docker_run_group import engine_elsewhere
    from tests.conftest import TEST_IMAGE
    from tests.tools.test_docker_killed_runs import _search_task

    elsewhere = engine_elsewhere(docker_client())
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlra", "run", str(_search_task(answer_task, tmp_path)),
         "--model", "baseline", "--search", "greedy", "--attempts", "2",
         "--attempts-parallel", "2", "--memory", "512m", "--no-tui",
         "--runs-dir", str(tmp_path / "runs"), "--run-id", "docker-group-search",
         "--sandbox", "docker", "--image", TEST_IMAGE],
        cwd=tmp_path, env={**os.environ, "DOCKER_HOST": docker_host},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    parents: dict[str, str] = {}
    try:
        while proc.poll() is None:
            with contextlib.suppress(Exception):  # a container gone between list and read
                for container in _containers(client, "docker-group-search"):
                    parent = container.attrs["HostConfig"].get("CgroupParent") or ""
                    parents[container.labels.get("mlra.attempt", "run")] = parent
            time.sleep(0.1)
        assert proc.wait(timeout=180) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    started = read_events(tmp_path / "runs" / "docker-group-search" / "events.jsonl")[0]
    assert isinstance(started, ev.RunStarted) and started.budget is not None
    budget = started.budget
    if elsewhere is not None or os.geteuid() != 0:
        assert budget.held_by == "none" and budget.not_held, budget
        pytest.skip(f"the run's group cannot hold this engine's containers: {budget.not_held}")
    assert budget.held_by.startswith("cgroup v") and budget.not_held is None, budget
    assert set(parents) == {"run", "a1", "a2"}, parents
    group = parents["run"]
    assert group.startswith(f"/mlra-{proc.pid}-run-") and set(parents.values()) == {group}
    assert _groups_named(group.lstrip("/")) == []
    assert _containers(client, "docker-group-search") == []
