"""What a run killed in the Docker sandbox leaves, and how the next start settles it
(against the real test engine, as test_docker_sandbox.py)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mlra.tools.sandbox import volume
from mlra.tools.sandbox.base import SandboxSpec
from tests.conftest import TEST_IMAGE
from tests.tools.test_docker_sandbox import client, docker_host  # noqa: F401  (fixtures)

WRITER = "i=0; while :; do i=$((i+1)); echo $i >> log; echo $i > /proc/1/fd/1; sleep 0.005; done"
"""Counts into the workspace's `log`, and after each line into the container's own log
(its init's output), which the test reads from the engine until the container goes."""


def _writer_task(answer_task: Path, tmp_path: Path) -> Path:
    task = tmp_path / "task"
    shutil.copytree(answer_task, task)
    toml = task / "task.toml"
    text = toml.read_text()
    start = text.index('command = "python -c')
    end = text.index("\n", start)
    toml.write_text(text[:start] + f"command = {WRITER!r}".replace("'", '"') + text[end:])
    return task


def _counts(chunks: list[bytes]) -> list[int]:
    return [int(n) for n in b"".join(chunks).split() if n.isdigit()]


async def _start_and_close(sandbox: Any) -> list[str]:
    try:
        return await sandbox.start()
    finally:
        await sandbox.close()


@pytest.mark.slow
@pytest.mark.skipif(volume.unavailable() is not None, reason="no workspace volume here")
def test_a_killed_runs_container_is_removed_before_its_volume_is_carried_back(
    tmp_path: Path,
    answer_task: Path,
    client: Any,  # noqa: F811
    docker_host: str,  # noqa: F811
) -> None:
    """The next start carried a killed run's workspace volume back to a plain folder (and
    deleted its image) before it removed the run's container, whose command went on
    writing: what it wrote after the copy was lost with the image. Any other sandbox's
    start did the same, with the container left running."""
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    runs = tmp_path / "runs"
    run_dir = runs / "docker-writer"
    env = {**os.environ, "DOCKER_HOST": docker_host}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlra", "run", str(_writer_task(answer_task, tmp_path)),
         "--model", "baseline", "--no-tui", "--runs-dir", str(runs), "--run-id", "docker-writer",
         "--sandbox", "docker", "--image", TEST_IMAGE, "--disk", "200m"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    chunks: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            found = client.containers.list(filters={"label": "mlra.run=docker-writer"})
            if found and len(_counts([found[0].logs()])) >= 5:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the writer never ran: {proc.stderr.read() if proc.stderr else ''}")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    try:
        (container,) = client.containers.list(filters={"label": "mlra.run=docker-writer"})
        stream = container.logs(stream=True, follow=True)
        reader = threading.Thread(target=lambda: chunks.extend(stream), daemon=True)
        reader.start()
        at_kill = len(_counts([container.logs()]))
        deadline = time.monotonic() + 30
        while len(_counts(list(chunks))) < at_kill + 20:  # the orphan writes on
            assert time.monotonic() < deadline, "the killed run's command stopped writing"
            time.sleep(0.05)

        # Any sandbox's start on this machine (another run's, local) settles the volumes of
        # mlra processes that are gone: not this one, which the container still writes to.
        volume.settle_stale()
        assert run_dir / "workspace" in [p for ps in volume._loop_mounts().values() for p in ps]

        sandbox = DockerSandbox(
            run_dir / "workspace", SandboxSpec(), image=TEST_IMAGE, run_id="next"
        )
        notices = asyncio.run(_start_and_close(sandbox))
        reader.join(timeout=30)
    finally:  # a failure above leaves the container running: nothing else removes it now
        for left in client.containers.list(all=True, filters={"label": "mlra.run=docker-writer"}):
            left.remove(force=True)
    assert any("docker-writer" in n for n in notices)
    assert client.containers.list(all=True, filters={"label": "mlra.run=docker-writer"}) == []
    written = _counts(list(chunks))[-1]
    kept = (run_dir / "workspace" / "log").read_text().split()
    # Every line the command wrote before its container was removed is in the workspace.
    assert int(kept[-1]) >= written, f"lines {kept[-1]}..{written} were lost"


def _search_task(answer_task: Path, tmp_path: Path) -> Path:
    """The answer task with two recipe variants, each a few seconds long."""
    task = tmp_path / "search-task"
    shutil.copytree(answer_task, task)
    toml = task / "task.toml"
    text = toml.read_text().replace("max_calls = 2", "max_calls = 10")
    text = text.replace('min_interval = "1h"', 'min_interval = "1s"')
    text = text.replace(
        'submit = "answer.txt"\n',
        'submit = "answer.txt"\nvars = { n = "7" }\nvariants = [{}, { n = "8" }]\n',
        1,
    )
    text = text.replace(
        'command = "python -c \\"print(6 * 7)\\"',
        'command = "sleep 3; python3 -c \\"print(6 * {n})\\"',
    )
    toml.write_text(text)
    return task


@pytest.mark.slow
def test_a_searchs_attempt_containers_carry_the_runs_id(
    tmp_path: Path,
    answer_task: Path,
    client: Any,  # noqa: F811
    docker_host: str,  # noqa: F811
) -> None:
    """An attempt's container was labelled mlra.run=a1 (its attempt's id, which every
    search has): `docker ps --filter label=mlra.run=RUN` missed a search's attempts, and a
    killed search's leftovers were reported as runs "a1, a2"."""
    env = {**os.environ, "DOCKER_HOST": docker_host}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlra", "run", str(_search_task(answer_task, tmp_path)),
         "--model", "baseline", "--search", "greedy", "--attempts", "2",
         "--attempts-parallel", "2", "--no-tui", "--runs-dir", str(tmp_path / "runs"),
         "--run-id", "docker-search", "--sandbox", "docker", "--image", TEST_IMAGE],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    attempts: set[str] = set()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and len(attempts) < 2:
            for container in client.containers.list(filters={"label": "mlra.run=docker-search"}):
                if "mlra.attempt" in container.labels:
                    attempts.add(container.labels["mlra.attempt"])
                    assert container.name.startswith("mlra-docker-search-a")
            time.sleep(0.1)
        assert attempts == {"a1", "a2"}, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    from mlra.tools.sandbox.docker_sandbox import remove_leftover_containers

    removed = remove_leftover_containers()
    assert "docker-search (attempt a1)" in removed and "docker-search (attempt a2)" in removed
    assert not any(r in ("a1", "a2") for r in removed)
    volume.settle_stale()  # the killed search's workspace volumes, as its resume would
    assert not [m for m in volume._loop_mounts().values() if str(tmp_path) in str(m)]
