"""Setting a run up: its id, its folder with the task's starter files, the sandbox
it is given, and the `run_started` event that records all of it."""

from __future__ import annotations

import secrets
import shutil
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlra import __version__
from mlra import events as ev
from mlra.agent.providers.base import ModelProvider
from mlra.agent.setup.config import RunConfig
from mlra.agent.setup.sandboxes import sandbox_request
from mlra.tasks.environment import ensure_environment
from mlra.tasks.spec import TaskSpec
from mlra.tools.sandbox.backends import sandbox_backend
from mlra.tools.sandbox.base import Sandbox, SandboxSpec
from mlra.tools.sandbox.default_limits import task_disk, task_memory

if TYPE_CHECKING:
    from mlra.tools.sandbox.run_group import RunGroup

BATCH_MARKERS = ("batch.json", ".mlra-batch-key")
"""Files a batch folder holds (batch/): a run whose runs folder lies in one hides it."""

NOT_STARTER = shutil.ignore_patterns("__pycache__")
"""Left out of a copied starter folder, at any depth."""


def new_run_id(task: str) -> str:
    """When and what, for people; and 64 random bits, so that no one (an agent that
    knows the task and roughly when it started included) can name another run's folder."""
    return f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{task}-{secrets.token_hex(8)}"


def run_id_problem(run_id: str) -> str | None:
    """Why a run id cannot name a folder inside the runs folder, or None if it can.

    The id is joined to the runs folder; one with a separator, `..` or an absolute
    path would put the run (and its workspace) somewhere else on the host.
    """
    if not run_id or not run_id.strip():
        return "a run id cannot be empty"
    if "/" in run_id or "\\" in run_id or "\0" in run_id:
        return f"run id {run_id!r} must be a plain folder name (no '/')"
    if run_id in (".", ".."):
        return f"run id {run_id!r} must be a plain folder name"
    return None


def make_run_folder(run_dir: Path, workspace: Path, task: TaskSpec) -> None:
    """The run folder, and in it the workspace with the task's starter files."""
    # Private to its owner: the agent may leave set-id programs in the workspace
    # (as root, its files are root's), and no other user may reach them.
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    run_dir.mkdir(mode=0o700, exist_ok=False)
    try:
        workspace.mkdir()
        for source in task.starter_paths():
            # Copied without their times (shutil.copy, not copy2): an installed task's
            # files carry the wheel's install time, which the Files pane showed as the
            # starter files' own; a file is dated when the run's workspace got it.
            if source.is_dir():
                # An installed task's folders hold pip's byte-code of the starter's .py
                # files (compiled at install): the installer's, not the task's.
                shutil.copytree(
                    source,
                    workspace,
                    dirs_exist_ok=True,
                    ignore=NOT_STARTER,
                    copy_function=shutil.copy,
                )
            else:
                shutil.copy(source, workspace / source.name)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise


def sandbox_spec(
    task: TaskSpec,
    config: RunConfig,
    run_dir: Path,
    *,
    budget: ev.Budget,
    python_env: Path | None = None,
    run_group: RunGroup | None = None,
) -> SandboxSpec:
    """The run's sandbox: what it hides and shows, and its limits from the run's budget
    (an attempt's run: its share; agent/setup/run_budget.py), its group under the run's."""
    # The task folders (hidden test data) and the runs folder (other runs' logs)
    # must not be readable from inside, even where the host file system is.
    hide = [*task.hidden_paths(), task.root.parent, run_dir.parent]
    runs = run_dir.parent
    if config.attempt is not None:
        # An attempt's run lies in the searching run's `attempts/`: the runs folder is
        # two levels up (the searching run's log, the other runs), hidden too.
        runs = run_dir.parent.parent.parent
        hide.append(runs)
    batch = runs.parent
    if any((batch / marker).exists() for marker in BATCH_MARKERS):
        # A batch's folder holds its neighbours' logs and the key their ids come from;
        # it may lie where the sandbox shows the host (under /usr/local, in the venv).
        hide.append(batch)
    return SandboxSpec(
        network=task.resources.network,
        env={**task.sandbox.env, **config.env},
        hide_paths=hide,
        read_only_files=task.read_only_originals(),
        python_env=python_env,
        run_group=run_group,
        **spec_limits(budget),
    )


def spec_limits(budget: ev.Budget) -> dict[str, Any]:
    """A sandbox spec's limits from a run's budget or an attempt's share (0: none, as a
    spec says it; agent/setup/run_budget.py)."""
    named = ("memory_mb", "disk_mb", "pids")
    return {
        "memory_mb": budget.memory_mb or 0,
        "disk_mb": budget.disk_mb or 0,
        "disk_shrinks": budget.disk_from_default,
        "cpus": budget.cpus,
        "pids_limit": budget.pids,
        "limit_sources": {k: v for k, v in budget.sources.items() if k in named},
    }


def task_environment(task: TaskSpec, config: RunConfig) -> tuple[Path | None, ev.Notice | None]:
    """The task's own Python environment for a run's sandbox (built here where the cache
    has none: the command line builds it before the run, so this finds it), and the
    notice saying which one; (None, None) for a task that declares no requirements.
    A container cannot run an environment built on the host: the run goes on with the
    image's Python, and the notice says so and how to get an image that has them.
    Raises TaskEnvError."""
    if not task.environment.declared:
        return None, None
    notice = environment_notice(task, config.sandbox, config.image)
    if notice is not None:
        return None, ev.Notice(level="warning", message=notice)
    found = ensure_environment(task, echo=None)
    if found is None:
        return None, None
    return found.path, ev.Notice(level="info", message=found.describe())


def environment_notice(task: TaskSpec, sandbox: str, image: str | None) -> str | None:
    """Why the task's own environment, built on this machine, cannot serve the commands
    of the backend `sandbox` names (a container has its own Python), or None: it does."""
    return sandbox_backend(sandbox).environment_notice(sandbox_request(task, model="", image=image))


def limit_choices(
    task: TaskSpec, config: RunConfig, workspace: Path
) -> tuple[int | None, int | None, dict[str, str]]:
    """The run's memory limit and workspace disk quota (MB) and where each came from:
    the user's flag as given (0: none), else the task's `[resources]` capped at what this
    machine can give, else None (the sandbox takes the machine's default and says so)."""
    res = task.resources
    sources: dict[str, str] = {}
    memory_mb = config.memory_mb
    if memory_mb is not None:
        sources["memory_mb"] = "--memory" if memory_mb else "--memory none: no limit"
    elif res.memory_gb:
        chosen = task_memory(int(res.memory_gb * 1024))
        memory_mb, sources["memory_mb"] = chosen.mb, chosen.source
    disk_mb = config.disk_mb
    if disk_mb is not None:
        sources["disk_mb"] = "--disk" if disk_mb else "--disk none: no quota"
    elif res.disk_gb:
        chosen = task_disk(int(res.disk_gb * 1024), workspace)
        disk_mb, sources["disk_mb"] = chosen.mb, chosen.source
    return memory_mb, disk_mb, sources


def sandbox_info(sandbox: Sandbox, workspace: Path) -> ev.SandboxInfo:
    by, version = sandbox.isolated_by or (None, None)
    return ev.SandboxInfo(
        kind=sandbox.kind,
        isolation=sandbox.isolation,
        network=sandbox.spec.network,
        workdir=sandbox.workdir,
        workspace=str(workspace),
        limits=sandbox.limits,
        isolated_by=by,
        isolated_by_version=version,
        network_via=sandbox.network_via,
        python_env=str(sandbox.spec.python_env) if sandbox.spec.python_env else None,
    )


def started_event(
    run_id: str,
    task: TaskSpec,
    config: RunConfig,
    *,
    time_limit_s: float,
    sandbox: ev.SandboxInfo,
    provider: ModelProvider | None,
    budget: ev.Budget | None = None,
) -> ev.RunStarted:
    return ev.RunStarted(
        run_id=run_id,
        task=task.name,
        task_title=task.title,
        task_dir=str(task.root),
        model=config.model,
        limits=ev.Limits(
            time_limit_s=time_limit_s,
            max_steps=config.max_steps,
            max_cost_usd=config.max_cost_usd,
            max_tokens=config.max_tokens,
        ),
        sandbox=sandbox,
        config=config.model_dump(mode="json"),
        mlra_version=__version__,
        context_window=provider.context_window if provider else None,
        budget=budget,
    )
