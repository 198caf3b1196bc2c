"""A search over attempts (agent/loop/attempts.py): each attempt's start and its end,
validated or not.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mlra.events.base import _Event
from mlra.events.run import Budget

# --- search over attempts (agent/loop/attempts.py) -----------------------------------------

SearchPolicy = Literal["none", "greedy", "llm"]
"""How a run searches: one line of work ("none"), AIDE's greedy draft/debug/improve
("greedy"), or the supervisor choosing with its attempt tools ("llm")."""

AttemptOperator = Literal["draft", "debug", "improve", "variant", "chosen"]
"""What an attempt was started to do: a new solution from the starter ("draft"), fix a
buggy attempt ("debug"), one change to a good one ("improve"), a variant the task's
recipe declares (the baseline agent's "variant"), or the supervisor's own instructions
("chosen")."""

AttemptStatus = Literal["running", "validated", "buggy", "out of time", "stopped", "lost"]
"""Where an attempt stands: running; ended with its artifact validated (a score);
ended with no valid artifact ("buggy", with why); its time (its own limit or the run's)
ran out before an artifact of its own was scored ("out of time", with why: its training
cut short with nothing written, only its parent's artifact unchanged in its workspace, or
its validation cut by the clock; no fault of its recipe to look for); stopped (`attempt_stop`, the run's
end by a person or a budget, or never started: its copy of the parent's workspace was
refused, with why); or its process died and it could not be taken up again ("lost").
One still running at the run's deadline ends as at its own limit: "out of time", or
"validated" where an artifact of its own was scored first (`AttemptFinished.run_deadline`)."""


class AttemptStarted(_Event):
    """An attempt: a worker subtask in a workspace of its own (its own run folder under
    `attempts/<id>/`, its own sandbox), started from the task's starter or from another
    attempt's workspace as that one ended. A node of the run's search tree."""

    type: Literal["attempt_started"] = "attempt_started"
    attempt: str
    """Its id (`a1`, `a2`...), unique in the run."""
    parent: str | None = None
    """The attempt whose workspace it started from; None: the task's starter."""
    operator: AttemptOperator = "chosen"
    instructions: str = ""
    variant: dict[str, str] = Field(default_factory=dict)
    """The recipe's variables for a baseline variant (`seed`, `lr`...)."""
    folder: str
    """Its run folder, relative to this run's (`attempts/a1`): its own log and workspace."""
    time_limit_s: float = 0.0
    """Run-clock seconds it was given: its share of what was left."""
    time_asked_s: float | None = None
    """The time limit its starter asked for (`attempt_start`'s `time_limit`), where less
    than its share: it binds, and is never raised."""
    raised: dict[str, float] = Field(default_factory=dict)
    """Attempts running as it started whose time limit was less than its share, raised
    to it (never past the run's deadline), by id: the new limit in seconds. Attempts
    running side by side get alike, however close to one's end the other began."""
    share: Budget | None = None
    """Its share of the run's budget (memory, CPUs, disk, processes): 1/K of it with K
    attempts at once, and of the disk what ended attempts and the run's own workspace
    left. None in logs from before budgets."""
    reserve_s: float = 0.0
    """Run-clock seconds its share left at the run's end, for the closing validation of
    the attempts running then (agent/loop/attempt_time.py `closing_reserve`): the last
    wave ends that long before the run's deadline. 0 in logs from before it was kept."""
    call_id: str | None = None


class AttemptFinished(_Event):
    type: Literal["attempt_finished"] = "attempt_finished"
    attempt: str
    parent: str | None = None
    status: AttemptStatus
    score: float | None = None
    """Its validation score (never the hidden test split's), in `metric`."""
    metric: str = ""
    higher_is_better: bool = True
    normalized: float | None = None
    why: str = ""
    """For a buggy, stopped or lost attempt: why, in one line."""
    run_deadline: bool = False
    """The run's time limit ended it while it ran (not its own, nor a person): read so, not
    as stopped. False in logs from before it was kept, where such an attempt reads
    "stopped", why "the time limit was reached"."""
    summary: str = ""
    """What it changed, in its worker's words (its report), or the variant it ran."""
    kept: str | None = None
    """The frozen copy its score was earned on, relative to this run's folder: what
    `submit(attempt=...)` grades."""
    artifact: str | None = None
    """The workspace path that copy was taken from (the artifact the task asks for)."""
    sha256: str | None = None
    duration_s: float = 0.0
    validation_s: float = 0.0
    """Its longest validation, in seconds: what the run keeps at its end for the closing
    validations is measured on it."""
    steps: int = 0
    tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    estimated_tokens: int = 0
    """Of `tokens`, those estimated (a server that sent no counts): the run's totals
    add the attempt's, so `result.json` and `mlra runs` show what its attempts used."""
    cost_usd: float = 0.0
