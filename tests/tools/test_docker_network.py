"""A task with the network on, in the Docker sandbox, on an engine with no bridge (the
test engine's dockerd runs with --bridge=none, as docker/test-engine.sh says)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from mlra.tools.sandbox.base import SandboxSpec
from tests.conftest import TEST_IMAGE, answer_copy, mlra_cli


@pytest.fixture
def no_bridge(client: Any) -> None:
    if any(n.name == "bridge" for n in client.networks.list(names=["bridge"])):
        pytest.skip("this engine has a bridge network")


@pytest.mark.usefixtures("no_bridge")
def test_a_network_task_is_refused_where_the_engine_has_no_bridge(
    tmp_path: Path,
    answer_task: Path,
    client: Any,
    docker_host: str,
) -> None:
    """The engine made the container all the same, with a loopback only: the run said
    "network: docker bridge" and every download in it failed."""
    from mlra.tools.sandbox.docker_preflight import DockerUnavailable
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    task = answer_copy(tmp_path / "task", ("network = false", "network = true"), source=answer_task)
    proc = mlra_cli(
        ["run", str(task), "--model", "baseline", "--no-tui", "--runs-dir", str(tmp_path / "runs"),
         "--sandbox", "docker", "--image", TEST_IMAGE],
        cwd=tmp_path, env={"DOCKER_HOST": docker_host},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "no bridge network" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()

    # A start the command line's check does not come before (a resume, a batch's run).
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    sandbox = DockerSandbox(
        workspace, SandboxSpec(network=True), image=TEST_IMAGE, run_id="docker-offline"
    )
    with pytest.raises(DockerUnavailable, match="no bridge network"):
        asyncio.run(sandbox.start())
    asyncio.run(sandbox.close())
    assert client.containers.list(all=True, filters={"label": "mlra.run=docker-offline"}) == []
