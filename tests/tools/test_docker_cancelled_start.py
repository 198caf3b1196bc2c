"""A Docker sandbox's start cancelled as its container is started leaves no container.

The container is created and started in a thread, which a cancelled await (an attempt
stopped by the supervisor as its sandbox starts, a search that ends) does not stop: the
container the thread went on to start was never recorded by the sandbox, so its close
never removed it, and it ran on (`sleep infinity`, the workspace bound) until a later
mlra's start found its owner dead. The test holds the start once the container runs,
cancels it there, lets the thread go on, closes the sandbox as the run does, and finds
no container of the run on the engine.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from mlra.tools.sandbox import run_uid
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.docker_exec import STDIN_DIR
from tests.conftest import TEST_IMAGE
from tests.tools.step_hold import Hold, cancel_held


def _mounted_from(container: Any, *_: object, **__: object) -> list[Path]:
    """The host folders a container binds (its stdin folder among them)."""
    return [Path(m["Source"]) for m in container.attrs.get("Mounts") or []]


async def test_a_start_cancelled_as_its_container_starts_leaves_no_container(
    tmp_path: Path, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import docker.models.containers

    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    run_id = "cancelled-start-test"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # No quota (disk_mb 0): the workspace's own cancel is tested with its volume.
    box = DockerSandbox(workspace, SandboxSpec(disk_mb=0), image=TEST_IMAGE, run_id=run_id)
    hold = Hold(
        monkeypatch, docker.models.containers.Container, "start", see=lambda _, c: _mounted_from(c)
    )
    await cancel_held(asyncio.ensure_future(box.start()), hold, box.close)
    assert client.containers.list(all=True, filters={"label": f"mlra.run={run_id}"}) == []
    stdin = [src for mounts in hold.seen for src in mounts if src.name == "in"]
    assert stdin and not stdin[0].parent.exists(), f"{STDIN_DIR}'s host folder is left"


async def test_a_start_that_gave_up_waiting_keeps_its_uid_until_its_container_is_gone(
    tmp_path: Path, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start cancelled while its thread's requests go on past the wait (a slow engine,
    a big workspace handed to the uid) goes on without it; the run's close then gave the
    uid back while the thread still made a container running as that uid, which another
    sandbox could claim meanwhile. Now the close ends once the thread removed it."""
    import docker.models.containers

    from mlra.tools.sandbox import docker_sandbox
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    if not run_uid.wanted():
        pytest.skip("a uid of its own is claimed only as root")
    monkeypatch.setattr(docker_sandbox, "START_WAIT_S", 0.01)
    order: list[str] = []
    real_unmade, real_release = DockerSandbox._unmade, run_uid.UidClaim.release

    def unmade(box: DockerSandbox, *args: object) -> None:
        real_unmade(box, *args)
        order.append("container removed")

    def release(claim: run_uid.UidClaim) -> None:
        if claim.fd is not None:
            order.append("uid given back")
        real_release(claim)

    monkeypatch.setattr(DockerSandbox, "_unmade", unmade)
    monkeypatch.setattr(run_uid.UidClaim, "release", release)
    run_id = "gave-up-start-test"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    box = DockerSandbox(workspace, SandboxSpec(disk_mb=0), image=TEST_IMAGE, run_id=run_id)
    assert box._claim is not None
    hold = Hold(monkeypatch, docker.models.containers.Container, "start")
    starting = asyncio.ensure_future(box.start())
    await hold.reached()
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting  # past its wait: the thread still holds its container
    closing = asyncio.ensure_future(box.close())
    for _ in range(10):  # turns of the loop: a close that does not wait ends in them
        await asyncio.sleep(0)
    assert not closing.done() and order == []
    hold.let_go()
    await closing
    # Both uids, the commands' and the keeper's (docker_tie.py), once it is gone.
    assert order == ["container removed", "uid given back", "uid given back"]
    assert client.containers.list(all=True, filters={"label": f"mlra.run={run_id}"}) == []


def _no_volume() -> str | None:
    from mlra.tools.sandbox import volume

    return volume.unavailable()


async def test_a_start_that_gave_up_waiting_keeps_its_volume_until_its_container_is_gone(
    tmp_path: Path, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start cancelled past its wait used to close the workspace's volume at once, while
    its thread's container bound it: a file the container wrote then went into a volume
    already carried back, and was lost. Now the volume stays until the run's close, which
    waits for the thread to remove its container first, and the file is kept."""
    import docker.models.containers

    from mlra.tools.sandbox import docker_sandbox
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    if (why := _no_volume()) is not None:
        pytest.skip(f"no workspace volume: {why}")
    monkeypatch.setattr(docker_sandbox, "START_WAIT_S", 0.01)
    run_id = "gave-up-volume-test"
    workspace = tmp_path / "run" / "ws"
    workspace.mkdir(parents=True)
    box = DockerSandbox(workspace, SandboxSpec(disk_mb=48), image=TEST_IMAGE, run_id=run_id)
    hold = Hold(monkeypatch, docker.models.containers.Container, "start", see=lambda _, c: c)
    starting = asyncio.ensure_future(box.start())
    await hold.reached()
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting  # past its wait: the thread still holds its running container
    assert workspace.is_mount(), "the volume was closed under the thread's container"
    (container,) = hold.seen
    code, out = await asyncio.to_thread(
        container.exec_run,
        ["sh", "-c", "echo late > late.txt"],
        user=f"{box.uid}:{box.gid}",
        workdir="/workspace",
    )
    assert code == 0, out
    hold.let_go()
    await box.close()
    assert client.containers.list(all=True, filters={"label": f"mlra.run={run_id}"}) == []
    assert not workspace.is_mount()
    assert (workspace / "late.txt").read_text() == "late\n"


async def test_a_removal_the_engine_refuses_is_asked_again_before_the_volume_closes(
    tmp_path: Path, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine refusing the container's removal once (busy, a request timed out) left
    the container running, the agent's processes still writing to a workspace whose
    volume was carried back and deleted under them. Now the removal is asked again, and
    the volume closes once the container is gone."""
    import docker.errors
    import docker.models.containers

    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    if (why := _no_volume()) is not None:
        pytest.skip(f"no workspace volume: {why}")
    real_remove = docker.models.containers.Container.remove
    refused: list[str] = []

    def remove_once_refused(container: Any, **kwargs: Any) -> None:
        if not refused:
            refused.append(container.name)
            raise docker.errors.APIError("the engine is busy")
        real_remove(container, **kwargs)

    monkeypatch.setattr(docker.models.containers.Container, "remove", remove_once_refused)
    run_id = "refused-removal-test"
    workspace = tmp_path / "run" / "ws"
    workspace.mkdir(parents=True)
    box = DockerSandbox(workspace, SandboxSpec(disk_mb=48), image=TEST_IMAGE, run_id=run_id)
    await box.start()
    result = await box.exec(["sh", "-c", "echo kept > kept.txt"], timeout=60)
    assert result.exit_code == 0, result.output
    await box.close()
    assert refused
    assert client.containers.list(all=True, filters={"label": f"mlra.run={run_id}"}) == []
    assert not workspace.is_mount()
    assert (workspace / "kept.txt").read_text() == "kept\n"


async def test_a_start_cancelled_before_its_container_is_made_makes_none(
    tmp_path: Path, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled as the image's accounts are read, the start's thread stops at its next
    request to the engine: no container is made only to be removed, so the stop waits
    for one request, not the dozen a container's start makes."""
    import docker.models.containers

    from mlra.tools.sandbox import accounts
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    made: list[object] = []
    real_create = docker.models.containers.ContainerCollection.create

    def create(collection: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(kwargs.get("name"))
        return real_create(collection, *args, **kwargs)

    monkeypatch.setattr(docker.models.containers.ContainerCollection, "create", create)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    box = DockerSandbox(workspace, SandboxSpec(disk_mb=0), image=TEST_IMAGE, run_id="stop-early")
    hold = Hold(monkeypatch, accounts, "container_accounts")
    await cancel_held(asyncio.ensure_future(box.start()), hold, box.close)
    assert made == []
    assert client.containers.list(all=True, filters={"label": "mlra.run=stop-early"}) == []
