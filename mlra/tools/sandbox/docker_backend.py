"""The Docker backend (`--sandbox docker`): commands run in a container of the run's
own (tools/sandbox/docker_sandbox.py), checked against the engine before the run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from mlra.tools.sandbox.backends import BackendRefused, SandboxBackend, SandboxRequest
from mlra.tools.sandbox.base import Sandbox
from mlra.tools.sandbox.docker_preflight import (
    DEFAULT_IMAGE,
    DockerUnavailable,
    TaskImage,
    preflight,
)
from mlra.tools.sandbox.docker_run_group import DockerRunGroup
from mlra.tools.sandbox.docker_sandbox import DEFAULT_PIDS_LIMIT, DockerSandbox
from mlra.tools.sandbox.spec import SandboxSpec


class DockerBackend(SandboxBackend):
    name = "docker"
    default_pids = DEFAULT_PIDS_LIMIT
    host_python = False
    """The image has its own Python and packages."""

    def run_group(
        self, *, memory_mb: int | None, pids: int | None, cpus: float | None
    ) -> DockerRunGroup:
        """Every container of the run started under it (`--cgroup-parent`), where the
        engine makes its groups in this machine's tree (tools/sandbox/docker_run_group.py)."""
        return DockerRunGroup(memory_mb=memory_mb, pids=pids, cpus=cpus)

    def preflight(self, request: SandboxRequest) -> list[str]:
        """A missing engine, image, GPU runtime or bridge (for a task with the network
        on), refused at once with what to do, instead of half-way into a run."""
        try:
            preflight(
                request.image or DEFAULT_IMAGE,
                request.gpus,
                network=request.network,
                task=task_image(request),
            )
        except DockerUnavailable as exc:
            raise BackendRefused(f"--sandbox docker: {exc}") from None
        return []

    def spec(self, spec: SandboxSpec, request: SandboxRequest) -> SandboxSpec:
        """The container's CPUs and GPUs: flags first, then the task's resources (memory
        and disk are the spec's already: agent/setup/run_setup.py limit_choices).

        The GPUs are the run's (agent/setup/sandboxes.py's run_gpus); a task that needs
        none gets none, so a CPU task cannot take a GPU another run uses.
        """
        cpus = spec.cpus or request.cpus or request.task_cpus
        return replace(spec, cpus=cpus, gpus=request.gpus)

    def create(
        self, workspace: Path, spec: SandboxSpec, request: SandboxRequest, *, run_id: str
    ) -> Sandbox:
        return DockerSandbox(
            workspace,
            spec,
            image=request.image or DEFAULT_IMAGE,
            run_id=run_id,
            pids_limit=spec.pids_limit or request.pids_limit or DEFAULT_PIDS_LIMIT,
        )

    def environment_notice(self, request: SandboxRequest) -> str | None:
        image = request.image or "the default image"
        task = task_image(request)
        how = (
            f"its own image has them: run {task.build_steps(base_built=True)[0]} (once), "
            f"then this command again with `--image {task.tag}`"
            if task is not None
            else "give an image that has them (--image, or [sandbox] image in task.toml)"
        )
        return (
            f"the task declares its own Python requirements ([environment]), but an environment "
            f"built on this machine cannot run inside the container: commands run on {image}'s "
            f"Python; {how}"
        )


def task_image(request: SandboxRequest) -> TaskImage | None:
    if request.task_image is None or request.task_root is None:
        return None
    return TaskImage(request.task_image, request.task_root)
