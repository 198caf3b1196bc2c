"""Which sandbox a run gets, from its config and its task.

The task says what it needs (GPUs, memory, CPUs, its image); flags override it. The
backend `--sandbox` names (tools/sandbox/backends.py) reads both as a SandboxRequest.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from mlra.tools.sandbox.backends import SandboxRequest, sandbox_backend
from mlra.tools.sandbox.base import Sandbox, SandboxSpec
from mlra.tools.sandbox.gpu_inventory import host_gpus

BASELINE_MODEL = "baseline"
"""The model name of the agent that follows the task's recipe instead of a model."""

if TYPE_CHECKING:
    from mlra.agent.setup.config import RunConfig
    from mlra.tasks.spec import TaskSpec


def run_gpus(task: TaskSpec, gpus: str | None) -> str:
    """The GPUs a run keeps to, in its commands, its attempts, its validations and its
    grading alike: `--gpus`, else (for a task that needs a GPU) those the host's
    CUDA_VISIBLE_DEVICES names, else all of them. A task that needs none gets none
    unless `--gpus` says otherwise."""
    if gpus:
        return gpus
    if task.resources.gpus <= 0:
        return "none"
    return host_gpus() or "all"


def sandbox_request(
    task: TaskSpec,
    *,
    model: str,
    isolation: Literal["auto", "bwrap", "none"] = "auto",
    image: str | None = None,
    gpus: str | None = None,
    cpus: float | None = None,
    pids_limit: int | None = None,
) -> SandboxRequest:
    """What the backend reads, from the user's settings (as flags or a config name
    them) and the task's; its GPUs are `run_gpus`'."""
    from mlra.tasks.foreign.image import task_image
    from mlra.tasks.foreign.loader import is_foreign

    res = task.resources
    foreign = task.environment.declared and is_foreign(task.root)
    return SandboxRequest(
        confined=model != BASELINE_MODEL,
        isolation=isolation,
        image=image or task.sandbox.image,
        gpus=run_gpus(task, gpus),
        cpus=cpus,
        task_cpus=res.cpus,
        pids_limit=pids_limit,
        network=res.network,
        task_root=task.root,
        task_image=task_image(task.name) if foreign else None,
    )


def config_request(config: RunConfig, task: TaskSpec) -> SandboxRequest:
    return sandbox_request(
        task, model=config.model, isolation=config.isolation, image=config.image,
        gpus=config.gpus, cpus=config.cpus, pids_limit=config.pids_limit,
    )  # fmt: skip


def create_sandbox(
    workspace: Path, spec: SandboxSpec, *, config: RunConfig, task: TaskSpec, run_id: str
) -> Sandbox:
    backend = sandbox_backend(config.sandbox)
    request = config_request(config, task)
    if config.attempt is not None:
        # Named by its search's run and itself ("s3/a1"): "a1" alone names no run, and
        # every search has one (its folder is the run's attempts/a1).
        run_id = f"{config.runs_dir.resolve().parent.name}/{run_id}"
    return backend.create(workspace, backend.spec(spec, request), request, run_id=run_id)
