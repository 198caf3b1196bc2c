"""Background jobs, run for the agent's `job_start`, `job_status`, `job_wait`, `job_stop`
(the tools themselves: tools/job_tools.py).

A foreground command blocks the agent until it ends, and whatever it leaves in
the background is killed with it. A job is a command the agent starts and does
not wait for: a training run it checks on while it writes the next script. It
runs through the sandbox's own `exec`, in a task of its own, so it is confined
exactly as a foreground command is (the same bubblewrap, cgroup and limits, or
the same container), is suspended with the others when the run is paused, and
is killed with its whole process group when it is stopped. Its output is teed
to a log file in the workspace, which outlives the job and mlra.

The run owns the jobs: the deadline, a submission and the run's end stop them
all (before the submission is frozen), and a run resumed after mlra died
reports the jobs that were running then as lost. Each start and end is an event
(`job_started`, `job_ended`), so the console, replay and resume read jobs from
the log; what only a live job has (its task, the output since the agent last
looked) is kept here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from mlra import events as ev
from mlra.tools.registry import ToolContext, ToolOutcome, error
from mlra.tools.sandbox.base import Sandbox, SandboxError
from mlra.tools.sandbox.output import BoundedOutput
from mlra.tools.sandbox.time_out import TimeOut

MAX_JOBS = 4
"""Jobs running at once: each may hold a GPU or most of the memory, and an agent that
starts one per step would otherwise fill the machine."""
JOBS_DIR = "jobs"
"""The workspace folder the jobs' logs are written to (`jobs/job-1.log`)."""
LAST_LINES = 10
"""Lines of output `job_status` shows of each job."""
PARTIAL_MAX = 4000
"""The most of an unfinished line kept for the last lines (its end)."""


def _as_shown(line: str) -> str:
    """A line as a terminal shows it: what was written after its last carriage return."""
    return line.rstrip("\r").rsplit("\r", 1)[-1]


SINCE_LOOK_CHARS = 16 * 1024
"""Of the output since the agent last looked, `job_wait` keeps this much of its head
and of its tail (a job may print gigabytes between two looks)."""
NO_TIME_OUT_S = 10 * 365 * 24 * 3600.0
"""A job has no time-out of its own: the run's deadline stops it."""
STOP_WAIT_S = 10.0
"""How long stopping a job waits for its processes to be gone before giving up on it."""


@dataclass
class JobRecord:
    """One job as the log tells it: its start, and its end once it has one."""

    started: ev.JobStarted
    ended: ev.JobEnded | None = None

    @property
    def running(self) -> bool:
        return self.ended is None


def _since_look() -> BoundedOutput:
    return BoundedOutput(SINCE_LOOK_CHARS, SINCE_LOOK_CHARS)


def _role(agent: str) -> ev.AgentRole | None:
    match agent:
        case "supervisor" | "worker" | "baseline":
            return agent
        case _:
            return None


@dataclass
class _Live:
    """What only a job running in this process has."""

    record: ev.JobStarted
    started_t: float
    """The run clock when it started."""
    log_fd: int
    task: asyncio.Task[None] | None = None
    stop_reason: str | None = None
    since_look: BoundedOutput = field(default_factory=lambda: _since_look())
    last_lines: deque[str] = field(default_factory=lambda: deque(maxlen=LAST_LINES))
    partial: str = ""
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def feed(self, text: str) -> None:
        """Output as it comes: to the log file, the unread output and the last lines."""
        with contextlib.suppress(OSError):
            os.write(self.log_fd, text.encode("utf-8", "replace"))
        self.since_look.add(text)
        lines = (self.partial + text).split("\n")
        # A line that never ends (a progress bar redrawn with \r) is kept bounded:
        # re-reading it whole on every chunk grew quadratically with its length.
        self.partial = lines.pop()[-PARTIAL_MAX:]
        self.last_lines.extend(_as_shown(line) for line in lines)

    def tail(self) -> list[str]:
        lines = list(self.last_lines)
        if self.partial:
            lines.append(_as_shown(self.partial))
        return lines[-LAST_LINES:]


class JobManager:
    """The run's jobs. `emit` writes an event to the run's log; `clock` is the run clock
    (seconds, pauses excluded); `records` is every job the log holds, this process's and
    earlier ones' (the run's state, folded from the log)."""

    def __init__(
        self,
        *,
        emit: Callable[[ev.Event], object],
        clock: Callable[[], float],
        records: Callable[[], Mapping[str, JobRecord]],
        max_jobs: int = MAX_JOBS,
        on_output: Callable[[str, str], None] | None = None,
        on_end: Callable[[str], None] | None = None,
    ) -> None:
        self._emit = emit
        self._on_output = on_output
        self._on_end = on_end
        """Told each job's output as it comes, and its end before its `job_ended` (the
        run's metrics read from job logs, agent/metrics/); neither may raise."""
        self._clock = clock
        self._records = records
        self.max_jobs = max_jobs
        self._live: dict[str, _Live] = {}
        self._unread: dict[str, BoundedOutput] = {}
        """The output of jobs that ended since the agent last waited on them."""
        self._closed = False

    # --- what the tools do ------------------------------------------------------------

    async def start(self, ctx: ToolContext, command: str, name: str = "") -> ToolOutcome:
        if self._closed:
            return error("the run is ending; no job can be started")
        if not command.strip():
            return error("job_start: the command is empty")
        if len(self._live) >= self.max_jobs:
            running = ", ".join(self._label(j) for j in self._live)
            return error(
                f"job_start: {len(self._live)} jobs are running ({running}), the most at once "
                f"is {self.max_jobs}; wait for one (`job_wait`) or stop one (`job_stop`) first"
            )
        records = self._records()
        number = len(records) + 1
        while f"job-{number}" in records:
            number += 1
        job_id = f"job-{number}"
        log = f"{JOBS_DIR}/{job_id}.log"
        sandbox = ctx.sandbox
        fd, log = sandbox.open_beneath(
            log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, make_parents=True
        )
        started = ev.JobStarted(
            job=job_id,
            name=name.strip(),
            command=command,
            log=log,
            agent=_role(ctx.agent),
            call_id=ctx.call_id or None,
        )
        live = _Live(record=started, started_t=self._clock(), log_fd=fd)
        self._live[job_id] = live
        self._emit(started)
        live.task = asyncio.get_running_loop().create_task(self._run(sandbox, live))
        what = f"{job_id} ({started.name})" if started.name else job_id
        return ToolOutcome(
            output=(
                f"Started {what} in the background; its output goes to {log}.\n"
                f"Check on it with `job_status`, wait for it with `job_wait` "
                f'(job="{job_id}"), stop it with `job_stop`.'
            ),
            data={"job": job_id, "log": log},
        )

    def status(self, job: str | None) -> ToolOutcome:
        records = self._records()
        if job is None:
            if not records:
                return ToolOutcome(output="No jobs have been started.")
            blocks = [self._describe(r, tail=r.running) for r in records.values()]
            return ToolOutcome(output="\n\n".join(blocks))
        record = self._find(job)
        if record is None:
            return self._unknown(job)
        return ToolOutcome(output=self._describe(record, tail=True))

    async def wait(self, ctx: ToolContext, job: str, timeout: float | None) -> ToolOutcome:
        record = self._find(job)
        if record is None:
            return self._unknown(job)
        job_id = record.started.job
        live = self._live.get(job_id)
        limit = 0.0
        if live is not None:
            moving = ctx.time_out(timeout)  # raised with the run's deadline while it waits
            await self._wait_run_clock(live, moving)
            limit = moving.seconds
        if job_id in self._live:
            unread: BoundedOutput | None = self._live[job_id].since_look
            self._live[job_id].since_look = _since_look()
        else:
            unread = self._unread.pop(job_id, None)
        record = self._find(job_id) or record
        if unread is not None:
            output = unread.text()
        else:  # a job of an earlier process (lost), or one already read to its end
            output = "\n".join(self._file_tail(ctx.sandbox, record.started.log))
            if output:
                output = f"(the last lines of {record.started.log})\n{output}"
        body = output or "(no new output)"
        if not body.endswith("\n"):
            body += "\n"
        if record.running:
            body = (
                f"[{self._label(job_id)} is still running after {limit:.0f} s of waiting]\n" + body
            )
        return ToolOutcome(
            output=body + self._state_line(record),
            exit_code=record.ended.exit_code if record.ended else None,
            data={"job": job_id, "running": record.running},
        )

    async def stop(self, job: str, reason: str = "stopped with job_stop") -> ToolOutcome:
        """Stop one job; `reason` goes into its `job_ended` (the user's stop from the
        console says so, and the agent's next `job_status` or `job_wait` reads it)."""
        record = self._find(job)
        if record is None:
            return self._unknown(job)
        job_id = record.started.job
        if job_id not in self._live:
            return ToolOutcome(output=f"{job_id} is not running. {self._state_line(record)}")
        await self._stop_one(job_id, reason)
        record = self._find(job_id) or record
        return ToolOutcome(output=f"Stopped {job_id}. {self._state_line(record)}")

    # --- what the run does ------------------------------------------------------------

    def running(self) -> list[tuple[str, float]]:
        """(label, run-clock seconds running) of each job running now, for the status note."""
        now = self._clock()
        return [(self._label(j), max(0.0, now - live.started_t)) for j, live in self._live.items()]

    def running_ids(self) -> list[tuple[str, str]]:
        """(id, label) of each job running in this process, for the console's job dialog."""
        return [(j, self._label(j)) for j in self._live]

    def last_line(self, job_id: str) -> str | None:
        """The last non-empty line a running job printed, from memory (the console shows
        it every tick: no file is read); None for a job not running in this process."""
        live = self._live.get(job_id)
        if live is None:
            return None
        for line in reversed(live.tail()):
            if line.strip():
                return line.rstrip("\r").rsplit("\r", 1)[-1]
        return ""

    async def stop_all(self, reason: str, *, final: bool = True) -> None:
        """Stop every running job (the deadline, a submission, the run's end); returns once
        their processes are dead and each has its `job_ended`. `final`: no job may start
        after this (the run is ending)."""
        if final:
            self._closed = True
        await asyncio.gather(*(self._stop_one(j, reason) for j in list(self._live)))

    # --- inside -------------------------------------------------------------------------

    async def _run(self, sandbox: Sandbox, live: _Live) -> None:
        """See one job through: run it, then record how it ended."""
        exit_code: int | None = None
        problem = ""
        try:
            result = await sandbox.exec(
                ["bash", "-c", live.record.command],
                timeout=NO_TIME_OUT_S,
                on_output=lambda _stream, text: self._feed(live, text),
            )
            exit_code = result.exit_code
        except asyncio.CancelledError:
            # Stopped: `exec` killed its process group before this. Cancelled with no
            # reason given, the event loop itself is going away (mlra is exiting).
            if live.stop_reason is None:
                live.stop_reason = "the run ended"
        except SandboxError as exc:
            problem = str(exc)
            live.feed(f"[mlra: the job could not run: {problem}]\n")
        except Exception as exc:  # a sandbox bug must not leave the job open
            problem = f"{type(exc).__name__}: {exc}"
            live.feed(f"[mlra: the job failed: {problem}]\n")
        finally:
            duration = round(max(0.0, self._clock() - live.started_t), 3)
            with contextlib.suppress(OSError):
                os.close(live.log_fd)
            stopped = live.stop_reason is not None
            if self._on_end is not None:
                with contextlib.suppress(Exception):
                    self._on_end(live.record.job)
            ended = ev.JobEnded(
                job=live.record.job,
                end="stopped" if stopped else "exited",
                exit_code=None if stopped else exit_code,
                reason=live.stop_reason or problem,
                duration_s=duration,
            )
            with contextlib.suppress(Exception):
                self._emit(ended)
            self._live.pop(live.record.job, None)
            self._unread[live.record.job] = live.since_look
            live.done.set()

    def _feed(self, live: _Live, text: str) -> None:
        live.feed(text)
        if self._on_output is not None:
            with contextlib.suppress(Exception):
                self._on_output(live.record.job, text)

    async def _stop_one(self, job_id: str, reason: str) -> None:
        live = self._live.get(job_id)
        if live is None or live.task is None:
            return
        if live.stop_reason is None:
            live.stop_reason = reason
        live.task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(live.done.wait()), STOP_WAIT_S)

    async def _wait_run_clock(self, live: _Live, limit: TimeOut) -> None:
        """Wait for the job to end, for at most `limit` seconds of the run clock (a pause
        stops this wait's clock as it stops the job), read again once spent: the run may
        have raised it."""
        begun = self._clock()
        while not live.done.is_set():
            left = limit.seconds - (self._clock() - begun)
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(live.done.wait()), timeout=left)

    def _find(self, job: str) -> JobRecord | None:
        """A job by id (`job-2`, or just `2`) or by name (the latest of that name)."""
        job = job.strip()
        records = self._records()
        if job in records:
            return records[job]
        if re.fullmatch(r"\d+", job) and f"job-{job}" in records:
            return records[f"job-{job}"]
        named = [r for r in records.values() if r.started.name and r.started.name == job]
        return named[-1] if named else None

    def _unknown(self, job: str) -> ToolOutcome:
        known = ", ".join(self._records()) or "none yet"
        return error(f"no job {job!r}; the jobs are: {known}")

    def _label(self, job_id: str) -> str:
        record = self._records().get(job_id)
        if record is not None and record.started.name:
            return f"{job_id} ({record.started.name})"
        return job_id

    def _state_line(self, record: JobRecord) -> str:
        job_id = record.started.job
        ended = record.ended
        if ended is None:
            live = self._live.get(job_id)
            took = self._clock() - live.started_t if live is not None else 0.0
            return (
                f"[{self._label(job_id)}: running for {_seconds(took)}; log {record.started.log}]"
            )
        took = _seconds(ended.duration_s)
        if ended.end == "exited":
            why = f"; {ended.reason}" if ended.reason else ""
            what = f"exited with code {ended.exit_code} after {took}{why}"
        elif ended.end == "stopped":
            what = f"stopped after {took} ({ended.reason or 'stopped'})"
        else:
            what = f"lost ({ended.reason or 'mlra stopped while it ran'})"
        return f"[{self._label(job_id)}: {what}; log {record.started.log}]"

    def _describe(self, record: JobRecord, *, tail: bool) -> str:
        lines = [self._state_line(record), f"command: {record.started.command}"]
        if tail:
            live = self._live.get(record.started.job)
            last = live.tail() if live is not None else []
            if last:
                lines.append("last lines:")
                lines += [f"  {line}" for line in last]
            elif live is not None:
                lines.append("(no output yet)")
        return "\n".join(lines)

    def _file_tail(self, sandbox: Sandbox, log: str) -> list[str]:
        """The last lines of a job's log file (a job of an earlier process, or ended)."""
        try:
            fd, _ = sandbox.open_beneath(log, os.O_RDONLY)
        except (OSError, SandboxError):
            return [f"(its log {log} is gone)"]
        try:
            size = os.fstat(fd).st_size
            os.lseek(fd, max(0, size - 8192), os.SEEK_SET)
            data = os.read(fd, 8192)
        except OSError:
            return []
        finally:
            os.close(fd)
        return data.decode("utf-8", "replace").splitlines()[-LAST_LINES:]


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{seconds / 60:.1f} min"


__all__ = ["JOBS_DIR", "MAX_JOBS", "JobManager", "JobRecord"]
