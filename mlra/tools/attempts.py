"""The supervisor's search tools: start attempts, read the tree, wait for and stop them.

`attempt_start` (parent, instructions) -> an id; `attempts` -> the tree as a table;
`attempt_wait` (id or any, timeout) -> what ended; `attempt_stop` (id). Each attempt is
a worker subtask in a workspace of its own (agent/loop/attempts.py); `submit(attempt=...)`
hands in one attempt's validated artifact. The run's manager sits behind `Attempts`,
so these tools know nothing of runs and controllers.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from mlra import events as ev
from mlra.tools.registry import Tool, ToolContext, ToolOutcome
from mlra.tools.sandbox.base import SandboxError

MAX_WAIT_S = 3600.0


def wait_bound(timeout: float, left_s: float | None) -> float:
    """The most an `attempt_wait` waits: its timeout, never over an hour nor past the
    run's deadline (`left_s`, the run's time left as it begins; None: not known). At least
    a second where the run's time is up: its deadline ends the wait. A wait bounded by
    the time left returned at once, again and again (22 calls in the 10 ms before the
    deadline's watcher woke), each "Nothing ended within 0 s". The displays say a wait's
    bound by this too (console/text/event_lines.py)."""
    most = min(timeout, MAX_WAIT_S)
    return max(0.0, most if left_s is None else min(most, max(left_s, 1.0)))


class Attempts(Protocol):
    """What the tools need of the run's attempt manager."""

    def start(
        self,
        *,
        parent: str | None,
        instructions: str,
        operator: ev.AttemptOperator,
        variant: dict[str, str] | None = None,
        time_limit_s: float | None = None,
        call_id: str | None = None,
    ) -> tuple[str, ev.Notice | None]:
        """Its id, and a notice its starter should read (a share shorter than its
        parent took: agent/loop/attempt_time.py `short_share`)."""
        ...

    async def wait(self, attempt: str | None, timeout_s: float) -> list[str]: ...

    def running(self) -> list[str]:
        """The attempts running now."""
        ...

    async def stop(self, attempt: str, reason: str = ...) -> None: ...

    def table(self) -> str:
        """The tree as the supervisor reads it."""
        ...

    def submittable(self, attempt: str) -> ev.AttemptFinished: ...


def short_share_line(notice: ev.Notice) -> str:
    """A short share as its starter reads it, once, in the result of the start it warns
    of: a supervisor not told kept starting work that could not finish in the time left."""
    return f"Warning: {notice.message}. Stop it (attempt_stop) unless its work can finish sooner."


def _refused(exc: Exception) -> SandboxError:
    """The manager's refusal as the error observation the agent reads."""
    return SandboxError(str(exc))


SupervisorOperator = Literal["draft", "debug", "improve", "chosen"]
"""The operators a supervisor's attempt may take: "variant" is the recipe's alone."""


class AttemptStartArgs(BaseModel):
    """A supervisor's attempt: instructions for its worker. No recipe variant: a worker
    is a model, which reads instructions and runs no recipe, so a variant was shown in
    place of the instructions it was given while nothing used it."""

    model_config = ConfigDict(extra="forbid")

    instructions: str = Field(
        description="What the attempt's worker should do: the idea to try, which files, what "
        "to measure. It sees only its own workspace and these instructions."
    )
    parent: str | None = Field(
        default=None,
        description="Start from this attempt's workspace as it ended (to debug or improve it); "
        "omit to start from the task's starter files (a new draft).",
    )
    operator: SupervisorOperator = Field(
        default="chosen",
        description="What it is: draft (new solution), debug (fix a buggy parent), improve "
        "(one change to a good parent), or chosen.",
    )
    time_limit: float | None = Field(
        default=None,
        description="Seconds it may run (default: its share of the time left).",
    )


class RecipeAttemptStartArgs(AttemptStartArgs):
    """mlra's own search with no model (agent/agents/search.py): a variant of the task's
    recipe, which the baseline agent runs."""

    operator: ev.AttemptOperator = Field(default="variant")  # pyright: ignore[reportIncompatibleVariableOverride]
    variant: dict[str, str] | None = Field(
        default=None, description="The recipe's variables to set."
    )


class AttemptStart(Tool[AttemptStartArgs]):
    name = "attempt_start"
    description = (
        "Start an attempt: a worker in a workspace of its own (a copy of `parent`'s, or the "
        "starter), which ends with its artifact validated on the hidden validation split. "
        "Returns its id at once; it runs beside you (see attempt_wait)."
    )
    Args = AttemptStartArgs
    reruns_in_replay = False

    def __init__(self, attempts: Attempts) -> None:
        self.attempts = attempts

    async def run(self, args: AttemptStartArgs, ctx: ToolContext) -> ToolOutcome:
        variant = args.variant if isinstance(args, RecipeAttemptStartArgs) else None
        try:
            attempt, notice = self.attempts.start(
                parent=args.parent,
                instructions=args.instructions,
                operator=args.operator,
                time_limit_s=args.time_limit,
                variant=variant,
                call_id=ctx.call_id,
            )
        except Exception as exc:
            raise _refused(exc) from None
        return ToolOutcome(
            output=f"Started attempt {attempt}"
            + (f" from {args.parent}" if args.parent else " from the starter")
            + ". Use attempt_wait to wait for it, or start others while it runs."
            + (f"\n{short_share_line(notice)}" if notice is not None else ""),
            data={"attempt": attempt},
        )


class RecipeAttemptStart(AttemptStart):
    """`attempt_start` as mlra's search with no model calls it: with a recipe variant."""

    Args = RecipeAttemptStartArgs


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AttemptsTable(Tool[NoArgs]):
    name = "attempts"
    description = "The attempts so far as a table: best first, each with its score, lineage and what it tried."
    Args = NoArgs

    def __init__(self, attempts: Attempts) -> None:
        self.attempts = attempts

    async def run(self, args: NoArgs, ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome(output=self.attempts.table() or "No attempts yet.")


class AttemptWaitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt: str | None = Field(
        default=None, description="The attempt to wait for; omit to wait for any running one."
    )
    timeout: float = Field(default=600.0, description="Seconds to wait at most.")


class AttemptWait(Tool[AttemptWaitArgs]):
    name = "attempt_wait"
    description = (
        "Wait until an attempt (or any running one) ends, or the timeout passes; returns "
        "what ended and the table."
    )
    Args = AttemptWaitArgs
    reruns_when_interrupted = True
    """A wait the run stopped in is waited again once the attempts are taken up."""

    def __init__(self, attempts: Attempts) -> None:
        self.attempts = attempts

    async def run(self, args: AttemptWaitArgs, ctx: ToolContext) -> ToolOutcome:
        timeout = wait_bound(args.timeout, ctx.remaining_s())
        idle = args.attempt is None and not self.attempts.running()
        try:
            ended = await self.attempts.wait(args.attempt, timeout)
        except Exception as exc:
            raise _refused(exc) from None
        if ended:
            head = f"Ended: {', '.join(ended)}."
        elif idle:  # answered at once: it did not wait the timeout it would have said
            head = "No attempt is running: there was nothing to wait for."
        else:
            head = f"Nothing ended within {timeout:.0f} s."
        return ToolOutcome(
            output=head + "\n" + (self.attempts.table() or "No attempts yet."),
            data={"ended": ended},
        )


class AttemptStopArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt: str = Field(description="The running attempt to stop.")


class AttemptStop(Tool[AttemptStopArgs]):
    name = "attempt_stop"
    description = "Stop a running attempt (it keeps any validation it already earned)."
    Args = AttemptStopArgs

    def __init__(self, attempts: Attempts) -> None:
        self.attempts = attempts

    async def run(self, args: AttemptStopArgs, ctx: ToolContext) -> ToolOutcome:
        try:
            await self.attempts.stop(args.attempt, "stopped by the supervisor")
        except Exception as exc:
            raise _refused(exc) from None
        return ToolOutcome(output=f"Stopped attempt {args.attempt}.")


def attempt_tools(attempts: Attempts, *, recipe: bool = False) -> list[Tool[Any]]:
    """The search's tools; `recipe`: for the baseline agent's search over the recipe's
    variants, whose `attempt_start` takes a variant (a supervisor's takes none)."""
    return [
        RecipeAttemptStart(attempts) if recipe else AttemptStart(attempts),
        AttemptsTable(attempts),
        AttemptWait(attempts),
        AttemptStop(attempts),
    ]
