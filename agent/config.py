"""A run's settings: what the user asked for, with the defaults filled in.

The whole config is recorded in the `run_started` event, so a run can be
understood, resumed or forked from its log alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field


class RunConfig(BaseModel):
    task: str
    model: str
    base_url: str | None = None
    runs_dir: Path = Path("runs")
    run_id: str | None = None
    time_limit_s: float | None = None
    """Overrides the task's time limit."""
    max_steps: int | None = None
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    observation_limit: int = 10_000
    """Characters of a tool's output the model sees; longer output is cut head+tail."""
    command_timeout_s: float = 600.0
    """Default time-out of one command when the agent names none."""
    review_every: int = 10
    """The supervisor reviews a running subtask every this many worker steps."""
    subtask_max_steps: int = 40
    """A subtask ends (and goes back to the supervisor) after this many worker steps."""
    max_output_tokens: int = 8192
    context_fraction: float = 0.8
    """Summarize older steps when the history passes this fraction of the context window."""
    keep_recent_turns: int = 6
    sandbox: Literal["local", "docker"] = "local"
    isolation: Literal["auto", "bwrap", "none"] = "auto"
    image: str | None = None
    """Docker sandbox: the image (default: the task's, else mlra's own, `mlra image build`)."""
    gpus: str | None = None
    """GPUs for the sandbox: "all", "none" or host ids "0,2" (default: all if the task needs any)."""
    memory_mb: int | None = None
    """Docker sandbox memory limit (default: the task's memory_gb)."""
    cpus: float | None = None
    """Docker sandbox CPU limit (default: the task's cpus)."""
    pids_limit: int | None = None
    """Docker sandbox process limit (default 8192)."""
    on_provider_failure: Literal["end", "pause"] = "end"
    """Headless runs end with status error; the console pauses so the user can decide."""
    resource_interval_s: float = 1.0
    start_paused: bool = False
    """Pause before the first agent action (to step through a run from its start)."""
    breakpoints: list[str] = Field(default_factory=list)
    """Break before matching tool calls (rules as `Breakpoint.parse` reads them)."""
    env: dict[str, str] = Field(default_factory=dict)
    snapshots: bool = True
    """Record the workspace's changes after every action, for replay and fork."""
    snapshot_max_file_mb: float = 8.0
    """Files larger than this are recorded by size and hash only."""
    seed: int | None = None
    """Which repetition of a task/model pair this run is (batches); recorded, not used to sample."""
