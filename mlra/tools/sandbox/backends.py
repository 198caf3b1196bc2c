"""The sandbox backends `--sandbox` chooses from, by name, and what each one owns.

A backend is the Sandbox kind (tools/sandbox/base.py) together with everything a run
decides differently for it: what must hold before the run starts, the spec's defaults,
how an attempt is shown its GPUs, its default process limit, and whether the task's
environment built on this machine can serve its commands. The rest of mlra asks the
backend instead of comparing `--sandbox` with strings, so a new backend is its own
module and one line of `BACKENDS`.

The table holds "module:attr" strings, imported only when a backend is chosen: reading
its names (the CLI's choices, the config's check) costs no sandbox import. Its methods
take a `SandboxRequest` of plain values, since this layer sees neither the run's config
nor its task (agent/setup/sandboxes.py fills one in from both).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from mlra.lazy_load import either, load, one_of

if TYPE_CHECKING:
    from mlra.tools.sandbox.base import Sandbox
    from mlra.tools.sandbox.run_group import RunGroup
    from mlra.tools.sandbox.spec import SandboxSpec

BACKENDS: dict[str, str] = {
    "local": "mlra.tools.sandbox.local_backend:LocalBackend",
    "docker": "mlra.tools.sandbox.docker_backend:DockerBackend",
}
"""Name (as `--sandbox` takes it) to "module:class" of its `SandboxBackend`."""

DEFAULT_BACKEND = "local"


class BackendRefused(Exception):
    """The run cannot start on this backend here: one line saying what to do instead."""


@dataclass(frozen=True)
class SandboxRequest:
    """What a backend reads of a run's settings and its task."""

    confined: bool = True
    """The agent's commands must never run unconfined (an LLM agent; the baseline agent
    follows the task's own recipe, so it may, said by a warning)."""
    isolation: Literal["auto", "bwrap", "none"] = "auto"
    """`--isolation`, for a backend that confines with bubblewrap."""
    image: str | None = None
    """The image the user or the task named (`--image`, else [sandbox] image)."""
    gpus: str = "none"
    """"all", "none" or host ids "0,2": agent/setup/sandboxes.py's run_gpus (`--gpus`,
    else, for a task that needs any, the host's CUDA_VISIBLE_DEVICES, else all)."""
    cpus: float | None = None
    """`--cpus`, else the task's own (`resources.cpus`) in `task_cpus`."""
    task_cpus: float | None = None
    pids_limit: int | None = None
    """The user's process limit (None: the spec's, else the backend's default)."""
    network: bool = False
    """The task has the network on."""
    task_root: Path | None = None
    """The task's folder, where a backend's advice names it."""
    task_image: str | None = None
    """The image `mlra image build --task` makes for the task, where the task is another
    benchmark's (tasks/foreign/) that declares Python requirements: no other image has them."""


class SandboxBackend:
    """One way of running a sandbox's commands. The defaults are a backend whose
    commands run on this machine as the local one does; a backend overrides what
    differs and `create`."""

    name: ClassVar[str]
    default_pids: ClassVar[int]
    """The process limit where neither the user nor the budget sets one."""
    host_python: ClassVar[bool] = True
    """Commands run on this machine's Python and packages: the task's starter is checked
    for modules missing here, and the task's environment built here serves the run."""

    def preflight(self, request: SandboxRequest) -> list[str]:
        """What must hold before a run folder is made: raises BackendRefused (one line)
        where the run cannot start; returns warnings (one line each) where it may."""
        return []

    def spec(self, spec: SandboxSpec, request: SandboxRequest) -> SandboxSpec:
        """The run's spec with this backend's defaults filled in from the request."""
        return spec

    def create(
        self, workspace: Path, spec: SandboxSpec, request: SandboxRequest, *, run_id: str
    ) -> Sandbox:
        """The sandbox itself, for a spec `spec()` has filled in."""
        raise NotImplementedError

    def run_group(
        self, *, memory_mb: int | None, pids: int | None, cpus: float | None
    ) -> RunGroup | None:
        """The run-level cgroup the run's sandboxes are made under, holding the run's
        total (tools/sandbox/run_group.py), not yet set up; None: each sandbox keeps
        only its own share."""
        return None

    def device_env(self, gpus: str) -> dict[str, str]:
        """What a sandbox's environment must say for its commands to use only these GPUs
        (an attempt's share, agent/agents/attempt_runs.py): nothing where the backend
        shows a sandbox no other device."""
        return {}

    def environment_notice(self, request: SandboxRequest) -> str | None:
        """Why the task's own environment, built on this machine, cannot serve the run's
        commands (a warning at the run's start), or None where it does."""
        return None


def backend_name(value: object) -> str:
    """A pydantic validator (before) for a config's `sandbox`: a name of the table, or
    the refusal pydantic gives a value outside a `Literal`, as before the table."""
    return one_of(value, tuple(BACKENDS))


def sandbox_backend(name: str) -> SandboxBackend:
    """The backend `name` names, its module imported now; ValueError (one line naming
    the table's names) for a name not in the table."""
    if name not in BACKENDS:
        raise ValueError(f"unknown sandbox {name!r}: use {either(BACKENDS)}")
    backend = load(BACKENDS[name])
    assert isinstance(backend, type) and issubclass(backend, SandboxBackend)
    return backend()
