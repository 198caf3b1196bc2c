"""A run's settings: what the user asked for, with the defaults filled in.

The whole config is recorded in the `run_started` event, so a run can be
understood, resumed or forked from its log alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, BeforeValidator, Field

from mlra.agent.record.log_budget import DEFAULT_LOG_BUDGET_MB
from mlra.events import Budget
from mlra.tools.fetch.policy import FetchSettings
from mlra.tools.research_table import RESEARCH_TOOLS, research_tool_name
from mlra.tools.sandbox.backends import DEFAULT_BACKEND, backend_name

if TYPE_CHECKING:
    from mlra.tasks.spec import TaskSpec


class AttemptSettings(BaseModel):
    """What an attempt's own run was started to do (agent/agents/attempt_agent.py)."""

    id: str
    parent: str | None = None
    operator: str = "chosen"
    instructions: str = ""
    variant: dict[str, str] = Field(default_factory=dict)
    inherited: dict[str, str] = Field(default_factory=dict)
    """Digests (SHA-256, as a validation's) of artifacts that are not the attempt's own,
    to whose they are ("a1's"): the task's artifact as its workspace was made (its parent's
    copy, or the starter's) and its parent's validated one. One of them, unchanged, is
    never validated as the attempt's (tasks/validation.py `RunValidator`): a child cut
    short before it wrote its own was scored with its parent's model."""


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
    supervisor_max_turns: int = Field(default=100, gt=0)
    """The supervisor's own model turns in one run (its reviews aside); at the limit the
    run ends as a budget does (reason "budget"), and what the workspace holds is graded."""
    max_repeated_failures: int = Field(default=3, gt=0)
    """The supervisor making the same failing call (same tool, same arguments) this many
    times ends the run (reason "repeated_failure"): it is stuck, not working."""
    repeats_told_at: int = Field(default=3, ge=2)
    """An agent making the same call with the same result this many times in a row is
    told so in its next prompt, and what to do instead (agent/loop/loops.py)."""
    repeats_end_at: int = Field(default=6, ge=2)
    """...and this many times in a row ends the run (reason "stuck"), unsubmitted."""
    max_output_tokens: int = 8192
    """The most tokens one answer may have (a model's own limit, when lower, wins)."""
    context_window: int | None = None
    """The model's context window in tokens: the user's `--context-window`, else what the
    server or the model table said when the run started."""
    context_window_from: str | None = None
    """Where `context_window` came from: "setting", "server", "model table" or "default"."""
    temperature: float | None = None
    """Sampling temperature sent to the model (default: the server's)."""
    tool_calls: Literal["native", "text", "auto"] = "auto"
    """Whether tool calls a model writes as text are read (see agent/providers/text_calls.py)."""
    context_fraction: float = 0.8
    """Summarize older steps when the history passes this fraction of the context window."""
    keep_recent_turns: int = 6
    sandbox: Annotated[str, BeforeValidator(backend_name)] = DEFAULT_BACKEND
    """Where commands run: a name of the backends' table (`--sandbox`,
    tools/sandbox/backends.py)."""
    isolation: Literal["auto", "bwrap", "none"] = "auto"
    image: str | None = None
    """Docker sandbox: the image (default: the task's, else mlra's own, `mlra image build`)."""
    gpus: str | None = None
    """GPUs for the sandbox: "all", "none" or host ids "0,2" (default: all if the task needs any)."""
    memory_mb: int | None = None
    """The sandbox's memory limit, local or Docker, for all its commands together (`--memory`;
    None: the task's memory_gb, else this machine's default; 0: none)."""
    disk_mb: int | None = None
    """The workspace's disk quota (`--disk`; None: the task's disk_gb, else the default from
    the runs folder's free space; 0: none). What is in force is `run_started`'s
    `sandbox.limits.disk_mb` (see agent/setup/run_setup.py `limit_choices`)."""
    cpus: float | None = None
    """The run's CPUs (`--cpus`): a CPU quota on the run's cgroup, all its sandboxes
    together (local), the container's limit (Docker; default: the task's cpus)."""
    pids_limit: int | None = None
    """Docker sandbox process limit (default 8192)."""
    on_provider_failure: Literal["end", "pause"] = "end"
    """Headless runs end with status error; the console pauses so the user can decide."""
    server_wait_s: float = 300.0
    """How long a run waits, its clock paused, for a model server that went away (a
    connection lost mid-answer, nothing answering) before that is a provider failure
    (`--server-wait`; 0: not at all). A local server that reloads or restarts comes back."""
    resource_interval_s: float = 1.0
    start_paused: bool = False
    """Pause before the first agent action (to step through a run from its start)."""
    breakpoints: list[str] = Field(default_factory=list)
    """Break before matching tool calls (rules as `Breakpoint.parse` reads them)."""
    notify: list[str] = Field(default_factory=list, exclude=True)
    """Where to tell the user what needs them (`--notify`: bell, desktop, cmd:COMMAND, a
    webhook URL; agent/notify/). Never recorded: a URL or a command may hold a token, so
    the log says only where notifications go ("bell, webhook to hooks.example.com")."""
    break_runs_jobs: bool = False
    """While a call waits for approval, let the sandbox's commands and jobs go on running
    (`--break-runs-jobs`); the wait then counts on the run clock. By default they are
    suspended and the clock stops, as a pause does."""
    env: dict[str, str] = Field(default_factory=dict)
    snapshots: bool = True
    """Record the workspace's changes after every action, for replay and fork."""
    snapshot_max_file_mb: float = 8.0
    """Files larger than this are recorded by size and hash only."""
    snapshot_quota_mb: float = 1024.0
    """The run's snapshot store holds at most this much (`--snapshot-quota`; 0: no quota);
    past it, changed files are recorded by size and hash without their contents (a
    notice says so once)."""
    log_budget_mb: float = Field(default=DEFAULT_LOG_BUDGET_MB, ge=0)
    """The most the run's `events.jsonl` should grow to (`--log-budget`; 0: no bound); near
    it output is logged shorter, at it the run ends (agent/record/log_budget.py). A
    search's attempts share it, each its `attempts`th."""
    ungraded: str = ""
    """Why this machine cannot grade the task, for a run the user started anyway
    (`mlra run --ungraded`): said by a notice at the start and in `result.json`."""
    task_notices: list[str] = Field(default_factory=list)
    """What was found out about the task before the run (its starter imports a module
    not installed here): a warning notice each at the run's start."""
    baseline_validate: bool = False
    """The baseline agent validates the recipe's artifact (`validate`) before submitting it."""
    seed: int | None = None
    """Which repetition of a task/model pair this run is (batches); also sent to providers
    that take a sampling seed (OpenAI-compatible servers), and `{seed}` in a baseline
    recipe's commands."""
    direction: Literal["higher", "lower"] | None = None
    """Which way the task's metric improves, as the user stated it (`--direction`) for a
    task whose own files do not say: recorded, so a resumed run judges success alike."""
    research_tools: list[Annotated[str, BeforeValidator(research_tool_name)]] = Field(
        default_factory=lambda: list(RESEARCH_TOOLS)
    )
    """The research tools the agents have (`--tools`, tools/research_table.py): GitHub
    clones, arXiv search and reading."""
    fetch: FetchSettings = Field(default_factory=FetchSettings)
    """What those tools may fetch beyond the defaults (the user's config file and
    `--allow-host`): recorded, so a resumed or forked run fetches by the same rules."""
    agent: Literal["supervisor", "worker"] = "supervisor"
    """`--agent`: a supervisor planning and handing a worker subtasks (which gives the
    worker the task whole if it never hands one), or the worker alone from the start
    (agent/agents/worker_alone.py)."""
    search: Literal["none", "greedy", "llm"] = "none"
    """How the run searches over attempts (`--search`, agent/agents/search.py): one line of work,
    AIDE's greedy policy, or the supervisor choosing with its attempt tools."""
    attempts: int = Field(default=4, gt=0)
    """`--attempts`: how many attempts a search makes at most."""
    attempts_parallel: int = Field(default=1, gt=0)
    """`--attempts-parallel`: how many run at once (the run's budget shared out between
    them: agent/setup/run_budget.py)."""
    attempt_min_s: float = Field(default=30.0, gt=0)
    """`--attempt-min-time`: the least time an attempt is given (a share below it is raised
    to it while the run has it left); with less of the run's time left none starts."""
    attempt: AttemptSettings | None = None
    """Set in an attempt's own run (attempts/<id>/): what it was started to do."""
    budget: Budget | None = None
    """Set in an attempt's own run: its share of the run's budget (agent/setup/run_budget.py),
    which its sandbox takes as its limits."""
    machine_shared_by: int = Field(default=1, gt=0)
    """How many runs share this machine's defaults at once (`mlra batch --parallel K`):
    a limit no flag or task sets is 1/K of the default, so K runs never add up past it."""
    machine_free_mb: int | None = Field(default=None, ge=0)
    """The runs disk's space free beyond its reserve (MB) as `mlra batch` measured it once
    when it started (`--machine-free-disk`): the default disk shares of its runs at once
    are each 1/K of half this one figure. Measured by each run at its own start, a run
    starting after a sibling reserved its volume got a third of the sibling's share. None:
    measured when the run starts."""

    def time_limit_for(self, task: TaskSpec) -> float:
        """The run's time limit: `--time-limit` where given, else the task's own."""
        return self.time_limit_s or task.time_limit_s
