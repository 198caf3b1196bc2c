"""Which sandbox a run gets, from its config and its task.

The task says what it needs (GPUs, memory, CPUs, its image); flags override it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from mlra.tools.sandbox.base import Sandbox, SandboxSpec

BASELINE_MODEL = "baseline"
"""The model name of the agent that follows the task's recipe instead of a model."""

if TYPE_CHECKING:
    from mlra.agent.setup.config import RunConfig
    from mlra.tasks.spec import TaskSpec


def docker_spec(spec: SandboxSpec, config: RunConfig, task: TaskSpec) -> SandboxSpec:
    """The spec with the container's CPUs and GPUs filled in: flags first, then the
    task's resources (memory and disk are the spec's already: run_setup.limit_choices).

    A task that needs GPUs gets all of them unless `--gpus` narrows it; one that
    needs none gets none, so a CPU task cannot take a GPU another run uses.
    """
    res = task.resources
    gpus = config.gpus or ("all" if res.gpus > 0 else "none")
    return replace(spec, cpus=spec.cpus or config.cpus or res.cpus, gpus=gpus)


def create_sandbox(
    workspace: Path, spec: SandboxSpec, *, config: RunConfig, task: TaskSpec, run_id: str
) -> Sandbox:
    if config.sandbox == "docker":
        from mlra.tools.sandbox.docker_sandbox import (
            DEFAULT_IMAGE,
            DEFAULT_PIDS_LIMIT,
            DockerSandbox,
        )

        return DockerSandbox(
            workspace,
            docker_spec(spec, config, task),
            image=config.image or task.sandbox.image or DEFAULT_IMAGE,
            run_id=run_id,
            pids_limit=spec.pids_limit or config.pids_limit or DEFAULT_PIDS_LIMIT,
        )
    from mlra.tools.sandbox.local import LocalSandbox

    res = task.resources
    spec = replace(
        spec,
        gpus=config.gpus or ("all" if res.gpus > 0 else "none"),
        pids_limit=spec.pids_limit or config.pids_limit,
    )
    # The baseline agent runs the task's own fixed recipe; an LLM agent's commands
    # are anyone's guess, so it never runs unconfined unless the user said so.
    return LocalSandbox(
        workspace,
        spec,
        isolation_mode=config.isolation,
        require_isolation=config.model != BASELINE_MODEL,
    )
