"""Where a batch's runs execute: this machine (`local`) or a Ray cluster (`ray`).

Both run the same `mlra run` (or `mlra resume`) command line per run; they
differ only in how a run waits for and gets its resources.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from mlra.batch.spec import Resources


@dataclass
class Job:
    run_id: str
    args: list[str]
    """The command after `python -m mlra` (the executor supplies its own Python)."""
    resources: Resources
    resume: bool = False
    env: dict[str, str] = field(default_factory=dict)


class Executor(Protocol):
    def cannot_hold(self, resources: Resources) -> str | None:
        """Why a run asking for this can never start here, or None."""
        ...

    async def run(self, job: Job, log_path: Path) -> int:
        """Wait for the resources, run the job to its end, return its exit status."""
        ...

    def close(self) -> None: ...
