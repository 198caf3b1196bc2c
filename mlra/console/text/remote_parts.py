"""The parts of a run controller an attached console reads besides its events: the
controls, the clock, the background jobs and a search's attempts, each as the run's
events and status say they are (console/text/attach_run.py's `RemoteRun` holds them).

Apart from `RemoteRun` because they only read what it has folded and send through it;
`Remote` names what they need of it, so they do not import it back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from mlra import events as ev
from mlra.agent.loop.attempts import submittable
from mlra.agent.loop.controls import Breakpoint, breakpoint_problem
from mlra.agent.record.state import RunState
from mlra.console.text.host_workspace import HostWorkspace
from mlra.console.text.written_calls import configured_tools
from mlra.control_socket import CtlRequest

TAIL_BYTES = 4096
"""How much of a job's log file is read for its last line."""


class Remote(Protocol):
    """What the parts read of the attached run (`RemoteRun`)."""

    run_dir: Path
    state: RunState
    sandbox: HostWorkspace

    @property
    def holds_at_breaks(self) -> bool: ...

    def send(self, req: CtlRequest) -> None: ...


class RemoteControls:
    """The run's controls as its events and status say they are."""

    def __init__(self, run: Remote) -> None:
        self._run = run
        self.hold_at_breaks = True
        self.breakpoints: list[Breakpoint] = []
        self.tools: dict[str, tuple[str, ...]] = {}
        """Each agent's tool names, as the run's status names them."""
        self._configured: dict[str, tuple[str, ...]] | None = None
        """Where the status names none (a run started by an older mlra): the tools its
        recorded config gives its agents (agent/agents/tool_lists.py)..."""
        self._called: dict[str, set[str]] = {}
        """...and those its agents have called, which an older mlra's agents may have
        had and this one's not."""

    def learn(self, event: ev.Event) -> None:
        """Note the tools the log shows (the run's config, its calls), for a run whose
        status names none."""
        if isinstance(event, ev.RunStarted):
            self._configured = configured_tools(event)
        elif isinstance(event, ev.ToolCall):
            self._called.setdefault(event.agent, set()).add(event.tool)

    def known_tools(self) -> dict[str, tuple[str, ...]]:
        """Each agent's tool names: the status's, else the log's; none where the log's
        config cannot be read (then the run alone judges a rule)."""
        if self.tools or self._configured is None:
            return self.tools
        known = {agent: list(names) for agent, names in self._configured.items()}
        for agent, names in self._called.items():
            have = known.setdefault(agent, [])
            have += sorted(names - set(have))
        return {agent: tuple(names) for agent, names in known.items()}

    @property
    def paused(self) -> bool:
        return self._run.state.paused

    def edit_problem(self, call_id: str, arguments: dict[str, Any]) -> str | None:
        """Not known here: the run itself refuses such an edit, and the refusal is shown."""
        return None

    def breakpoint_problem(self, bp: Breakpoint) -> str | None:
        """As the run says it, from the tools its status named, or where an older run's
        status names none, from its log (its config's agents' tools and its calls)."""
        tools = self.known_tools()
        return breakpoint_problem(bp, tools) if tools else None


class RemoteClock:
    """The run clock, from the run's status and the stamps of its events, running on
    between them while the run runs (as the run's own clock does: not while it is
    paused, held at a breakpoint, or ended)."""

    def __init__(self, run: Remote) -> None:
        self._run = run
        self._base = 0.0
        self._at = time.monotonic()

    def set(self, elapsed_s: float) -> None:
        self._base, self._at = elapsed_s, time.monotonic()

    def _ticking(self) -> bool:
        state = self._run.state
        phase = state.phase
        if phase == "running":
            return True
        return phase == "awaiting_approval" and not state.paused and not self._run.holds_at_breaks

    def elapsed(self) -> float:
        if self._ticking():
            return self._base + (time.monotonic() - self._at)
        return self._base


class RemoteJobs:
    """The run's background jobs, from its events; a job's last line read from the tail
    of its log file in the workspace (the run's own memory of it is in its process)."""

    def __init__(self, run: Remote) -> None:
        self._run = run

    def running_ids(self) -> list[tuple[str, str]]:
        return [
            (job.started.job, f"{job.started.job} ({job.started.name})")
            if job.started.name
            else (job.started.job, job.started.job)
            for job in self._run.state.running_jobs
        ]

    def last_line(self, job_id: str) -> str | None:
        record = self._run.state.jobs.get(job_id)
        if record is None or record.ended is not None:
            return None
        data = self._run.sandbox.tail(record.started.log, TAIL_BYTES)
        if data is None:
            return None
        for line in reversed(data.decode("utf-8", errors="replace").split("\n")):
            if line.strip():
                return line.rstrip("\r").rsplit("\r", 1)[-1]
        return ""


class NoOutputFeed:
    """What the log does not take reaches only the run's own console: nothing comes here."""

    def watch_output(self, watcher: Callable[[ev.ToolOutput | ev.TextDelta], None]) -> None:
        return None


class RemoteAttempts:
    """A search's attempts, judged from the run's events and folder as the run judges."""

    def __init__(self, run: Remote) -> None:
        self._run = run

    def submittable(self, attempt: str) -> ev.AttemptFinished:
        return submittable(self._run.state.attempts, self._run.run_dir, attempt)

    def child(self, attempt: str) -> Any:
        node = self._run.state.attempts.get(attempt)
        if node is None or node.finished is not None:
            return None
        return _AttemptMessages(self._run, attempt)


class _AttemptMessages:
    def __init__(self, run: Remote, attempt: str) -> None:
        self._run = run
        self._attempt = attempt

    def inject(self, target: str, text: str) -> None:
        # Only the attempt's worker reads messages (as in the run's own console).
        self._run.send(CtlRequest(op="inject", target=f"attempt:{self._attempt}", text=text))
