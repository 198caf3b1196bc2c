"""Where a batch's runs execute: this machine (`local`) or a Ray cluster (`ray`).

Both run the same `mlra run` (or `mlra resume`) command line per run; they
differ only in how a run waits for and gets its resources.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from mlra.batch.spec import Resources

LOCAL_RUN_ENV = "MLRA_BATCH_RUN"
"""Set for a run the local executor starts: the terminal's Ctrl-C reaches the run as well
as the batch, and the run stops without evaluating, as the batch then asks it to
(console/apps/headless_run.py), rather than starting to grade what its workspace holds."""


@dataclass
class Job:
    run_id: str
    args: list[str]
    """The command after `python -m mlra` (the executor supplies its own Python)."""
    resources: Resources
    resume: bool = False
    env: dict[str, str] = field(default_factory=dict)
    task_folder: str | None = None
    """The user's task folder, where the run's task is one (shipped to nodes that lack it)."""
    placed: Callable[[str], None] = lambda _where: None
    """Called when the run has started on a node, with where ("host (node 1a2b3c4d)")."""
    copied: Callable[[Path], None] = lambda _folder: None
    """Called once the run's event log starts arriving from a node without the batch
    folder, with the folder its copy grows in, laid out as the run's folder (its folder
    itself comes back at its end): the batch's progress reads it as it reads a local run."""


class NotPlaced(Exception):
    """The run can never start here (no node can hold what it asks): the message says why."""


class AttemptLost(Exception):
    """The attempt ended with its node (or its worker) and no exit status; it counts as
    one of the run's attempts, and the run is tried again within `--max-attempts`."""


class Executor(Protocol):
    def cannot_hold(self, resources: Resources) -> str | None:
        """Why a run asking for this can never start here, or None."""
        ...

    async def run(self, job: Job, log_path: Path) -> int:
        """Wait for the resources, run the job to its end, return its exit status.

        Raises NotPlaced when it can never start, AttemptLost when its node went away."""
        ...

    def close(self) -> None: ...
