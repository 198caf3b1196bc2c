"""The local backend (`--sandbox local`, the default): commands run on this machine,
inside bubblewrap where it can be had (tools/sandbox/local.py)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from mlra.tools.sandbox import netns
from mlra.tools.sandbox.backends import BackendRefused, SandboxBackend, SandboxRequest
from mlra.tools.sandbox.base import Sandbox
from mlra.tools.sandbox.limits import DEFAULT_PIDS
from mlra.tools.sandbox.local import INSTALL_HINT, LocalSandbox
from mlra.tools.sandbox.run_group import RunGroup
from mlra.tools.sandbox.spec import SandboxSpec


class LocalBackend(SandboxBackend):
    name = "local"
    default_pids = DEFAULT_PIDS
    host_python = True

    def run_group(self, *, memory_mb: int | None, pids: int | None, cpus: float | None) -> RunGroup:
        return RunGroup(memory_mb=memory_mb, pids=pids, cpus=cpus)

    def preflight(self, request: SandboxRequest) -> list[str]:
        """An agent that would go unconfined is refused before anything is created: only
        the user's explicit `--isolation none` lets an LLM agent run so; the baseline
        agent's fixed recipe may, with a warning, since it is the task's own. A `network`
        task's commands need a network namespace of their own (slirp4netns)."""
        if request.isolation == "none":
            return []
        from mlra.tools.sandbox.bwrap import isolation_problem

        problem = isolation_problem()
        if problem is None:
            return _own_network(request) if request.network else []
        if request.isolation == "bwrap" or request.confined:
            raise BackendRefused(
                f"no isolation for the agent's commands ({problem}): {INSTALL_HINT}, "
                "or pass --isolation none to run the agent unconfined"
            )
        return [f"{problem}; the baseline agent runs unconfined and its score is marked unisolated"]

    def spec(self, spec: SandboxSpec, request: SandboxRequest) -> SandboxSpec:
        return replace(spec, gpus=request.gpus, pids_limit=spec.pids_limit or request.pids_limit)

    def create(
        self, workspace: Path, spec: SandboxSpec, request: SandboxRequest, *, run_id: str
    ) -> Sandbox:
        # The baseline agent runs the task's own fixed recipe; an LLM agent's commands
        # are anyone's guess, so it never runs unconfined unless the user said so.
        return LocalSandbox(
            workspace, spec, isolation_mode=request.isolation, require_isolation=request.confined
        )

    def device_env(self, gpus: str) -> dict[str, str]:
        # Every device node is there: CUDA is told which.
        return {"CUDA_VISIBLE_DEVICES": gpus}


def _own_network(request: SandboxRequest) -> list[str]:
    problem = netns.network_problem()
    if problem is None or os.environ.get(netns.HOST_NETWORK_VAR) == "1":
        return []
    problem = f"the task has the network on, but {problem}"
    if request.isolation == "bwrap" or request.confined:
        raise BackendRefused(f"{problem}: {netns.NETWORK_HINT}")
    return [f"{problem}; the baseline agent's commands share the host's network"]
