"""The agent's four job tools: `job_start`, `job_status`, `job_wait`, `job_stop`.

Thin: each turns its arguments into a call on the run's JobManager (tools/jobs.py), which
owns the jobs, their processes, logs and events; what the model reads of a job is worded
there, so the console and resume see the same thing the agent does.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mlra.tools.jobs import JOBS_DIR, MAX_JOBS, JobManager
from mlra.tools.registry import Tool, ToolContext, ToolOutcome


class JobStartArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(description="The bash command line to run in the background.")
    name: str = Field(default="", description="Optional: a short name to know the job by.")


class JobArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job: str = Field(description="The job's id (e.g. job-1) or name.")


class JobStatusArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job: str | None = Field(default=None, description="The job's id or name; omit for all jobs.")


class JobWaitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job: str = Field(description="The job's id (e.g. job-1) or name.")
    timeout: float | None = Field(
        default=None,
        description=(
            "Seconds to wait at most; default: the run's command time-out. The job goes on "
            "running if it has not ended by then."
        ),
    )


class JobStart(Tool[JobStartArgs]):
    name = "job_start"
    description = (
        "Start a bash command in the background (a training run, a long evaluation) and "
        "return at once with its job id, while you go on with other tool calls. Its output "
        f"(stdout and stderr) is written to {JOBS_DIR}/<job id>.log in the workspace. At most "
        f"{MAX_JOBS} jobs run at once; all are stopped at the deadline and on submit."
    )
    Args = JobStartArgs
    reruns_in_replay = False

    def __init__(self, jobs: JobManager) -> None:
        self._jobs = jobs

    async def run(self, args: JobStartArgs, ctx: ToolContext) -> ToolOutcome:
        return await self._jobs.start(ctx, args.command, args.name)


class JobStatus(Tool[JobStatusArgs]):
    name = "job_status"
    description = (
        "The state of one background job or of all: running or how it ended (exit code), "
        "how long it has run, its log file and its last lines of output."
    )
    Args = JobStatusArgs

    def __init__(self, jobs: JobManager) -> None:
        self._jobs = jobs

    async def run(self, args: JobStatusArgs, ctx: ToolContext) -> ToolOutcome:
        return self._jobs.status(args.job)


class JobWait(Tool[JobWaitArgs]):
    name = "job_wait"
    description = (
        "Wait until a background job ends or the timeout passes, and return its output "
        "since you last waited on it (cut in the middle if long), with its state."
    )
    Args = JobWaitArgs

    def __init__(self, jobs: JobManager) -> None:
        self._jobs = jobs

    async def run(self, args: JobWaitArgs, ctx: ToolContext) -> ToolOutcome:
        return await self._jobs.wait(ctx, args.job, args.timeout)


class JobStop(Tool[JobArgs]):
    name = "job_stop"
    description = "Stop a background job: its command and everything it started are killed."
    Args = JobArgs

    def __init__(self, jobs: JobManager) -> None:
        self._jobs = jobs

    async def run(self, args: JobArgs, ctx: ToolContext) -> ToolOutcome:
        return await self._jobs.stop(args.job)


JOB_TOOL_NAMES = ("job_start", "job_status", "job_wait", "job_stop")


def job_tools(jobs: JobManager) -> list[Tool[Any]]:
    """The four job tools, acting on the run's jobs."""
    return [JobStart(jobs), JobStatus(jobs), JobWait(jobs), JobStop(jobs)]
