"""What a run killed in the Docker sandbox leaves, and how the next start settles it
(against the real test engine, as test_docker_sandbox.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mlra.tools.sandbox import volume, volume_settle
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.docker_exec import STDIN_DIR
from mlra.tools.sandbox.docker_stdin import stdin_folder_of
from mlra.tools.sandbox.volume_users import loop_mounts
from tests.conftest import ANSWER_RECIPE, TEST_IMAGE, answer_copy

WRITER = "i=0; while :; do i=$((i+1)); echo $i >> log; sleep 0.005; done"
"""Counts into the workspace's `log`."""
RELAY = ["sh", "-c", "exec tail -n +1 -F /workspace/log > /proc/1/fd/1"]
"""Copies the log, as the container sees it, into the container's own log (its init's
output), which the test reads from the engine until the container goes: run by the
test as the init's uid, which the commands' is not (docker_tie.py)."""


def _held_open(container: Any) -> int:
    """The container's stdin, opened for writing by the test (root on this machine): the
    container outlives its mlra as where its tie could not be made (docker_tie.py)."""
    return os.open(f"/proc/{container.attrs['State']['Pid']}/fd/0", os.O_WRONLY)


def _writer_task(answer_task: Path, tmp_path: Path) -> Path:
    writer = f"command = {WRITER!r}".replace("'", '"')
    return answer_copy(tmp_path / "task", (ANSWER_RECIPE, writer), source=answer_task)


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
    client: Any,
    docker_host: str,
) -> None:
    """The next start carried a killed run's workspace volume back to a plain folder (and
    deleted its image) before it removed the run's container, whose command went on
    writing: what it wrote after the copy was lost with the image. Any other sandbox's
    start did the same, with the container left running. The container's stdin folder in
    the host's /tmp was left for good."""
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
    held: int | None = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            found = client.containers.list(filters={"label": "mlra.run=docker-writer"})
            if found and held is None:
                held = _held_open(found[0])
                found[0].exec_run(RELAY, user=found[0].attrs["Config"]["User"], detach=True)
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
        stdin_folders = [
            Path(m["Source"]) for m in container.attrs["Mounts"] if m["Destination"] == STDIN_DIR
        ]
        assert len(stdin_folders) == 1 and stdin_folders[0].is_dir()  # the killed mlra's
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
        volume_settle.settle_stale()
        assert run_dir / "workspace" in [p for ps in loop_mounts().values() for p in ps]

        sandbox = DockerSandbox(
            run_dir / "workspace", SandboxSpec(), image=TEST_IMAGE, run_id="next"
        )
        notices = asyncio.run(_start_and_close(sandbox))
        reader.join(timeout=30)
    finally:  # a failure above leaves the container running: nothing else removes it now
        for left in client.containers.list(all=True, filters={"label": "mlra.run=docker-writer"}):
            left.remove(force=True)
        if held is not None:
            os.close(held)
    assert any("docker-writer" in n for n in notices)
    assert client.containers.list(all=True, filters={"label": "mlra.run=docker-writer"}) == []
    # Its commands' stdin folder, which the killed mlra never removed, went with it.
    left = stdin_folder_of(stdin_folders[0])
    assert left is not None and left != stdin_folders[0] and not left.exists()
    written = _counts(list(chunks))[-1]
    kept = (run_dir / "workspace" / "log").read_text().split()
    # Every line the command wrote before its container was removed is in the workspace.
    assert int(kept[-1]) >= written, f"lines {kept[-1]}..{written} were lost"


def _search_task(answer_task: Path, tmp_path: Path) -> Path:
    """The answer task with two recipe variants, each a few seconds long."""
    return answer_copy(
        tmp_path / "search-task",
        ("max_calls = 2", "max_calls = 10"),
        ('min_interval = "1h"', 'min_interval = "1s"'),
        (
            'submit = "answer.txt"\n',
            'submit = "answer.txt"\nvars = { n = "7" }\nvariants = [{}, { n = "8" }]\n',
        ),
        (
            'command = "python -c \\"print(6 * 7)\\"',
            'command = "sleep 3; python3 -c \\"print(6 * {n})\\"',
        ),
        source=answer_task,
    )


@pytest.mark.slow
def test_a_searchs_attempt_containers_carry_the_runs_id(
    tmp_path: Path,
    answer_task: Path,
    client: Any,
    docker_host: str,
) -> None:
    """An attempt's container was labelled mlra.run=a1 (its attempt's id, which every
    search has): `docker ps --filter label=mlra.run=RUN` missed a search's attempts, and a
    killed search's leftovers were reported as runs "a1, a2". Each attempt's container
    ran on after the search was killed, too: they end with it now."""
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
    # Each attempt's container is tied to the killed mlra: all end with it (stopped).
    # The engine's own word that each ended (a second; 60 bounds a failure only).
    for container in client.containers.list(filters={"label": "mlra.run=docker-search"}):
        container.wait(timeout=60)
    assert client.containers.list(filters={"label": "mlra.run=docker-search"}) == []
    from mlra.tools.sandbox.docker_sandbox import remove_leftover_containers

    removed = remove_leftover_containers()
    assert "docker-search (attempt a1)" in removed and "docker-search (attempt a2)" in removed
    assert not any(r in ("a1", "a2") for r in removed)
    # The killed search's workspace volumes, as its resume settles them: each sandbox's
    # start (the search's own, its attempts') settles its own folder's, waiting for one
    # that another mlra's start (any on this machine settles every gone owner's, a
    # concurrent suite's too) is carrying back. A bare settle_stale() leaves those to
    # that other mlra, still mounted.
    run = tmp_path / "runs" / "docker-search"
    for folder in (run, run / "attempts" / "a1", run / "attempts" / "a2"):
        volume_settle.settle_stale(folder)
    assert not [m for m in loop_mounts().values() if str(tmp_path) in str(m)]


class _OnlyRun:
    """The test engine as `remove_leftover_containers` sees it, narrowed to one run id:
    the engine is shared by every test run on this machine, and their leftovers are theirs
    to find."""

    def __init__(self, engine: Any, run_id: str) -> None:
        self._client, self._run_id = engine, run_id
        self.containers = self

    def list(self, **kwargs: Any) -> list[Any]:
        return self._client.containers.list(all=True, filters={"label": f"mlra.run={self._run_id}"})


ROUNDS = 10


def test_leftovers_another_mlra_is_removing_are_gone_once_they_are_removed(
    client: Any,
) -> None:
    """Two mlra starting at once both remove a killed run's container: the one whose removal
    came second ('removal already in progress') went on while the container's processes
    could still run, to carry back the workspace's volume under them (or see it in use and
    start a resumed run's container on it). It now waits for the container to be gone."""
    from mlra.tools.sandbox.docker_preflight import LABEL_OWNER, LABEL_RUN
    from mlra.tools.sandbox.docker_sandbox import remove_leftover_containers

    dead = subprocess.Popen(["true"])
    dead.wait()
    owner = f"{os.uname().nodename}/{dead.pid}/0.00"  # an mlra that is gone
    run_id = f"removed-twice-{os.getpid()}"
    for _ in range(ROUNDS):  # each round: one more chance for the two removals to meet
        made = client.containers.run(
            TEST_IMAGE, ["sleep", "600"], detach=True,
            labels={LABEL_RUN: run_id, LABEL_OWNER: owner},
        )  # fmt: skip
        both = threading.Barrier(2)

        def other_mlra(container_id: str = made.id, both: threading.Barrier = both) -> None:
            both.wait()
            with contextlib.suppress(Exception):
                client.api.remove_container(container_id, force=True)

        other = threading.Thread(target=other_mlra)
        other.start()
        try:
            both.wait()
            remove_leftover_containers(_OnlyRun(client, run_id))
            left = client.containers.list(all=True, filters={"id": made.id})
        finally:
            other.join()
        assert left == [], "the container was still there, its removal in progress"
