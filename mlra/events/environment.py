"""What happens around the agents: resource samples, background jobs, the human's
controls, the workspace's snapshots, and a run resumed or forked from another.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from mlra.events.base import AgentRole, _Event
from mlra.events.run import SandboxInfo

# --- environment and the human -------------------------------------------------------


class GpuSample(BaseModel):
    index: int
    name: str
    util_percent: float | None
    """None where NVML does not report it (NOT_SUPPORTED on some virtual GPUs)."""
    mem_used_mb: float
    mem_total_mb: float


class ResourceSample(_Event):
    type: Literal["resource_sample"] = "resource_sample"
    cpu_percent: float
    ram_used_mb: float
    ram_total_mb: float
    disk_workspace_mb: float
    gpus: list[GpuSample] = Field(default_factory=list)
    gpu_error: str | None = None
    run_cpu_percent: float | None = None
    """The run's own commands (the sandbox's process tree, or its container), in
    percent of one CPU (200 = two CPUs busy); None where it was not measured."""
    run_mem_mb: float | None = None
    """The resident memory of the run's own commands; None where it was not measured."""
    run_processes: int | None = None
    """How many processes the run's commands are now (0 between commands)."""
    pool_mem_mb: float | None = None
    """What the whole run holds (its sandbox's commands and every attempt's), from the
    run's cgroup: the use against `run_started`'s budget; None where no group holds it."""
    pool_processes: int | None = None
    """The whole run's processes, from the same group."""
    pool_disk_mb: float | None = None
    """The blocks the run's workspace and its attempts' folders hold together (a
    search's), a volume by the files on it (tools/sandbox/disk_use.py); None for a run
    without attempts, whose use is `disk_workspace_mb`."""


# --- background jobs -----------------------------------------------------------------

JobEnd = Literal["exited", "stopped", "lost"]
"""How a job ended: its command exited (any code); it was stopped (`job_stop`, the
deadline, a submission, the run's end); or mlra died while it ran (a resumed run
cannot reattach to it, so it is reported lost, its log kept)."""


class JobStarted(_Event):
    """A command started in the background by `job_start`: it runs in the sandbox beside
    the agent's tool calls until it exits or is stopped."""

    type: Literal["job_started"] = "job_started"
    job: str
    """The job's id (`job-1`, `job-2`...), unique in the run."""
    name: str = ""
    command: str
    log: str
    """The workspace-relative file its output (stdout and stderr) is teed to."""
    agent: AgentRole | None = None
    call_id: str | None = None


class JobEnded(_Event):
    type: Literal["job_ended"] = "job_ended"
    job: str
    end: JobEnd
    exit_code: int | None = None
    reason: str = ""
    """Why it was stopped or lost, in words (e.g. "the time limit was reached")."""
    duration_s: float = 0.0
    """Run-clock seconds it ran: time paused does not count (its processes were stopped)."""


ControlAction = Literal[
    "pause",
    "resume",
    "step",
    "inject",
    "approve",
    "reject",
    "edit",
    "stop",
    "breakpoints",
    "quit",
    "attempt_stop",
    "promote",
]
"""`attempt_stop` and `promote` name the search's attempt in `target`: the user stopped
it, or submitted it (the run then ends and grades that attempt's kept copy)."""


class Control(_Event):
    """A human's action on the run, so a replay shows what the human did."""

    type: Literal["control"] = "control"
    action: ControlAction
    target: str | None = None
    text: str | None = None
    call_id: str | None = None
    arguments: dict[str, Any] | None = None
    source: str = "user"
    """Who: `user` (the console, `mlra ctl`), the run itself (`step`, `start`...), or
    `replay` (`REPLAYED`): a replay applying the recorded user's edit or rejection."""


REPLAYED = "replay"
"""The `source` of a `control` a replay (`--model replay:RUN`) writes where it runs a call
as the recorded run's user decided it at a breakpoint (an edit, a rejection)."""


class FileChange(BaseModel):
    """One file as a workspace scan found it.

    `path` (and every workspace path in an event: `removed`, a tool's `data`) is the
    file's name relative to the workspace, exactly as the file system holds it, in one
    form: a str as Python gives names (os.fsdecode), where a byte that is not UTF-8
    is a lone surrogate U+DC80-U+DCFF. The log writes such a surrogate as its JSON
    escape (`\\udce9`, agent/record/eventlog.py `dump_json`) and reads it back to the same str,
    and os.fsencode turns that back into the name's very bytes (fork restores it so).
    A str rather than bytes keeps every reader, display and comparison of paths as it
    is; a display replaces what it cannot show, the log never does.
    """

    path: str
    size: int
    sha256: str | None = None
    """None: not hashed (larger than what one scan reads, or the scan's budget was spent);
    the file is then known by its size and modification time only."""
    stored: bool = True
    """False: its content is not in the snapshot store (a file over the size threshold,
    the store past its quota, or not hashed)."""
    mtime_ns: int = 0


class SnapshotLeftOut(BaseModel):
    """What one scan saw but its event does not record, so a replay and a fork can say
    what they cannot show or restore (the event stays well under a megabyte whatever
    the step did)."""

    changed: int = 0
    """Files added or changed that are not listed in `changed`."""
    removed: int = 0
    """Files removed that are not listed in `removed`."""
    skipped: int = 0
    """Entries the scan could not look at: folders unreadable or changed while walked,
    paths too long to record, entries past the scan's bound."""
    notes: list[str] = Field(default_factory=list)
    """Why, in words, once each."""


class WorkspaceSnapshot(_Event):
    """What an agent step changed in the workspace; the contents are in the run's
    snapshot store (`snapshots/objects/<sha256>`), so a replay can show any step's files."""

    type: Literal["workspace_snapshot"] = "workspace_snapshot"
    step: int
    changed: list[FileChange] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    left_out: SnapshotLeftOut | None = None
    """Set when the scan or the event's bounds left something unrecorded."""
    log_budget_bytes: int | None = None
    """The bytes of paths the event was held to, fewer than a snapshot may list, because
    the run's log neared its size budget (agent/record/log_budget.py); what did not fit
    is counted in `left_out`. None: held to the usual bound only, if any."""


class RunResumed(_Event):
    """The run goes on in a new process (after a crash, a kill or a stop)."""

    type: Literal["run_resumed"] = "run_resumed"
    dropped_torn_line: bool = False
    interrupted_calls: list[str] = Field(default_factory=list)
    """Tool calls that were running when the run stopped; they did not finish."""
    model: str = ""
    sandbox: SandboxInfo | None = None
    """The sandbox the run goes on in, which may be confined otherwise than before."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """The limits the command changed (`--time-limit`...: `time_limit_s`, `max_steps`,
    `max_cost_usd`, `max_tokens`), as `run_started`'s config names them: the run goes on
    under these, and every view of it says so."""


class RunForked(_Event):
    """This run began as a copy of another run's log up to a step (`mlra fork`)."""

    type: Literal["run_forked"] = "run_forked"
    run_id: str
    source_run: str
    source_dir: str
    at_step: int
    model: str
    edited_action: dict[str, Any] | None = None
    message: str | None = None
    missing_files: list[str] = Field(default_factory=list)
    """Workspace files recorded by hash only that could not be restored."""
    not_recorded: list[str] = Field(default_factory=list)
    """What the source's snapshots up to the step left unrecorded (so the restored
    workspace lacks it), one line per snapshot that says so."""
    sandbox: SandboxInfo | None = None
    """The sandbox the fork runs in."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """The limits the fork changed from its source's, as `RunResumed.settings`."""
