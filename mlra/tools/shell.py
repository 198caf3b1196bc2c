"""`bash` and `python`: the agent's hands in the sandbox.

Both run through the sandbox's `exec`, so output streams to the console while the
command runs, and the command is killed at its time-out or the run's deadline,
whichever comes first. The observation ends with a status line, because an
agent that cannot tell a crash from silence guesses.
"""

from __future__ import annotations

import signal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mlra.tools.registry import Tool, ToolContext, ToolOutcome
from mlra.tools.sandbox.base import ExecResult, Sandbox, SandboxError

TIMEOUT_HELP = (
    "Seconds before the command is killed; default: the run's command time-out. "
    "It never runs past the run's deadline."
)


TIME_LIMIT_KEY = "ended_by_time_limit"
"""In a command's result data: the run's (or attempt's) time limit, not the command's own
time-out, killed it: what ended its attempt was the clock (attempt_finish.py)."""


def format_seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:,.0f} s"


def status_line(result: ExecResult, timeout_s: float, *, deadline: bool = False) -> str:
    """The last line of a command's observation, e.g. `[exit code 0, 1.2 s]`. `deadline`:
    the time-out was the run's time limit, not the command's own, so the line says
    that (a per-command time-out the agent could raise is another matter)."""
    if result.timed_out and deadline:
        return (
            f"[the run's time limit ended this command after {format_seconds(timeout_s)}; "
            "it was killed]"
        )
    if result.timed_out:
        return f"[timed out after {format_seconds(timeout_s)}; the command was killed]"
    code = result.exit_code
    took = format_seconds(result.duration_s)
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"[killed by {name}, {took}]"
    if code == 137:
        return f"[exit code 137 (killed by SIGKILL, e.g. out of memory), {took}]"
    return f"[exit code {code}, {took}]"


def command_outcome(result: ExecResult, timeout_s: float, *, deadline: bool = False) -> ToolOutcome:
    body = result.output
    if not body:
        body = "(no output)\n"
    elif not body.endswith("\n"):
        body += "\n"
    return ToolOutcome(
        output=body + status_line(result, timeout_s, deadline=deadline),
        ok=result.exit_code == 0 and not result.timed_out,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        data={TIME_LIMIT_KEY: True} if result.timed_out and deadline else {},
    )


async def run_command(
    ctx: ToolContext,
    command: list[str],
    requested_timeout: float | None,
    *,
    stdin: bytes | None = None,
) -> ToolOutcome:
    limit = ctx.time_out(requested_timeout)  # raised, while it runs, with the run's deadline
    result = await ctx.sandbox.exec(command, timeout=limit, on_output=ctx.on_output, stdin=stdin)
    # As it ended: the run's deadline, not its own time-out, is what stopped it.
    return command_outcome(result, limit.seconds, deadline=limit.bound)


class BashArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(description="The bash command line to run.")
    timeout: float | None = Field(default=None, description=TIMEOUT_HELP)


class Bash(Tool[BashArgs]):
    name = "bash"
    description = (
        "Run a bash command in the workspace and return its output (stdout and stderr "
        "interleaved) and exit code. Each call starts a fresh shell in the workspace folder: "
        "`cd` and variables do not carry over, and anything it starts in the background is "
        "killed when the command ends: run a long job with `job_start` where you have it, "
        "else in the foreground with a suitable timeout (and tee its log to a file). Very "
        "long output is cut in the middle."
    )
    Args = BashArgs

    async def run(self, args: BashArgs, ctx: ToolContext) -> ToolOutcome:
        return await run_command(ctx, ["bash", "-c", args.command], args.timeout)


class PythonArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str | None = Field(default=None, description="Python source to run (fed on stdin).")
    script: str | None = Field(
        default=None, description="Path of a Python file in the workspace to run instead."
    )
    args: list[str] = Field(default_factory=list, description="Command-line arguments.")
    timeout: float | None = Field(default=None, description=TIMEOUT_HELP)

    @model_validator(mode="after")
    def _one_source(self) -> PythonArgs:
        if (self.code is None) == (self.script is None):
            given = "both were" if self.code is not None else "neither was"
            raise ValueError(f"give exactly one of `code` or `script` ({given} given)")
        return self


class Python(Tool[PythonArgs]):
    name = "python"
    description = (
        "Run Python in the workspace with the environment's interpreter (torch and the "
        "task's libraries are installed): either `code` (a snippet) or `script` (a .py file "
        "in the workspace), with optional `args`. Returns the output and exit code; "
        "nothing persists between calls except files."
    )
    Args = PythonArgs

    async def run(self, args: PythonArgs, ctx: ToolContext) -> ToolOutcome:
        if args.script is not None:
            # Refuses paths outside the workspace; the file must exist so the model
            # gets a clear message rather than Python's "can't open file".
            command = ["python", script_path(ctx.sandbox, args.script), *args.args]
            return await run_command(ctx, command, args.timeout)
        assert args.code is not None
        return await run_command(
            ctx, ["python", "-", *args.args], args.timeout, stdin=args.code.encode("utf-8")
        )


def script_path(sandbox: Sandbox, script: str) -> str:
    """The script's path relative to the workspace, checked to be a file there.

    Checked here so the model gets a clear message rather than Python's
    "can't open file", and so a path outside the workspace is refused.
    """
    host = sandbox.host_path(script)
    if not host.is_file():
        what = "a folder" if host.is_dir() else "not found"
        raise SandboxError(f"script {script!r} is {what} in the workspace")
    rel = sandbox.relative(host)
    return "./" + rel if rel.startswith("-") else rel
