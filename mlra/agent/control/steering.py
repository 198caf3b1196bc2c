"""The human's controls over a running agent: pause, step, resume, messages,
breakpoints, the decision on a held call, and stop.

Each is recorded as a `control` event, so a replay shows what the human did
and when. A base class of the run controller, which is what the console holds:
these stay its public methods.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mlra import events as ev
from mlra.agent.loop.clock import RunClock
from mlra.agent.loop.controls import Breakpoint, Controls, Decision
from mlra.agent.loop.ending import Ending
from mlra.agent.record.eventlog import EventLog
from mlra.agent.record.state import (
    AFTER_ACTION,
    AFTER_ATTEMPTS,
    PAUSED_AFTER_ATTEMPTS,
    RunState,
)
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import TaskSpec
from mlra.tools.jobs import JobManager
from mlra.tools.sandbox.base import Sandbox

if TYPE_CHECKING:
    from mlra.agent.loop.attempts import AttemptManager

StepOutcome = Literal[
    "approved",
    "attempt",
    "after_action",
    "after_attempts",
    "pausing_already",
    "one_action",
    "none",
]
"""What a step did (`Steering.step`), for the one line the console's toast and `mlra ctl`
say: the waiting call approved, an attempt's action, a pause after the action in hand
asked for (a search's: after its attempts' actions in hand), or asked for already
(nothing recorded), one action, nothing (the run stops). Both word it from this alone:
ctl chose its words from the attempts it saw running, and the key toasted a pause to
come where the step did nothing."""


class Steering:
    run_id: str
    run_dir: Path
    config: RunConfig
    task: TaskSpec
    time_limit_s: float
    log: EventLog | None
    controls: Controls
    clock: RunClock
    state: RunState
    sandbox: Sandbox | None
    jobs: JobManager
    attempts: AttemptManager

    USER_STOP_REASON = "stopped by the user"
    """The `job_ended` reason of a job the user stopped from the console: the log's
    record of the user's act, and what the agent's `job_status` and `job_wait` read."""

    def __init__(self) -> None:
        self._stop = asyncio.Event()
        self._stop_ending: Ending | None = None
        self._job_stops: set[asyncio.Task[Any]] = set()
        """The user's job and attempt stops under way (held so they are not collected
        mid-way)."""
        self._stepped_last: str | None = None
        """The attempt a step last let take an action (`step`: each in turn)."""
        self._stepping: set[str] = set()
        """The attempts a step of this paused search let take an action not yet done:
        its clock runs while one does, since a stepped action is work its time limit
        counts (docs/search.md), and stands still again once none does."""
        self.on_paused: Callable[[], None] | None = None
        """Told when this run pauses: a search's attempt tells its search that the
        action a step let it take is done (agent/agents/attempt_runs.py)."""
        self.control_source = "user"
        """Who the `control` events now recorded come from: the console's user, or a
        command from outside the process (`ctl`, `attach`: agent/control/control_server.py),
        set around the call by `acting_as`."""

    @contextlib.contextmanager
    def acting_as(self, source: str) -> Iterator[None]:
        """Record the controls taken inside as `source`'s (the calls are synchronous,
        so nothing else acts in between)."""
        before, self.control_source = self.control_source, source
        try:
            yield
        finally:
            self.control_source = before

    def stop_job(self, job: str) -> bool:
        """Stop a running background job for the user (the console's job dialog); returns
        at once, the job's `job_ended` follows. False if it is not running here."""
        if job not in {j for j, _ in self.jobs.running_ids()}:
            return False
        task = asyncio.get_running_loop().create_task(
            self.jobs.stop(job, reason=self.USER_STOP_REASON)
        )
        self._job_stops.add(task)
        task.add_done_callback(self._job_stops.discard)
        return True

    def stop_attempt(self, attempt: str) -> bool:
        """Stop a running attempt of the search for the user (the console's Attempts
        pane); returns at once, recorded first, its `attempt_finished` ("stopped", why:
        by the user) follows. False if it is not running, or the run is ending (its end
        stops it: `AttemptManager.stop_now`). Its task is cancelled here, not in a task
        of its own: a run's end that began before that task ran read it "out of time"."""
        from mlra.agent.loop.attempts import AttemptRefused

        node = self.state.attempts.get(attempt)
        if node is None or node.finished is not None or self.state.finished is not None:
            return False
        try:
            self.attempts.stop_now(attempt, self.USER_STOP_REASON)
        except AttemptRefused:
            return False
        self._control("attempt_stop", target=attempt)
        return True

    def promote_attempt(self, attempt: str) -> bool:
        """Submit a search's attempt for the user: the run ends as a user's stop does and
        grades that attempt's kept copy (agent/loop/evaluation.py), whatever the supervisor
        was doing. False if it may not be submitted (still running, never validated, its
        copy gone: `AttemptManager.submittable` says why) or the run is ending already."""
        from mlra.agent.loop.attempts import AttemptRefused

        if self._stop.is_set() or self.state.finished is not None:
            return False
        try:
            self.attempts.submittable(attempt)
        except AttemptRefused:
            return False
        self._control("promote", target=attempt)
        # A submission, the person's: the run ends "submitted", as the agent's would, so
        # the score line, `mlra runs` and batch reports never call it "nothing submitted".
        self._stop_ending = Ending(
            reason="submitted",
            by="user",
            attempt=attempt,
            note=f"attempt {attempt} promoted by the user",
            message=f"attempt {attempt} promoted by the user",
        )
        self.controls.close()
        self._stop.set()
        return True

    def append(self, event: ev.Event) -> ev.Event:
        raise NotImplementedError

    def _control(self, action: ev.ControlAction, **fields: Any) -> None:
        fields.setdefault("source", self.control_source)
        self.append(ev.Control(action=action, **fields))

    def pause(self, *, source: str | None = None) -> None:
        # Once a stop is asked for, the run only ends: a pause then stopped its clock and
        # suspended its commands on the way to grading.
        if self.controls.paused or self.state.finished or self._stop.is_set():
            return
        self.controls.pause()
        self.clock.pause()
        if self.sandbox is not None:
            self.sandbox.suspend_commands()
        # A search's step over ends here: its pause says so (not "after one action").
        after = source == "step" and self.state.pausing_attempts
        self._control(
            "pause",
            source=source or self.control_source,
            text=PAUSED_AFTER_ATTEMPTS if after else None,
        )
        for child in self._attempt_runs():  # a search pauses whole, its attempts with it
            child.pause(source="run")
        # A search's agent waiting for its attempts to stand still stops waiting: one
        # stopping does not pause (nor say so), and the wait lasted till something moved.
        self.attempts.moved()
        if self.on_paused is not None:
            self.on_paused()

    def resume(self) -> None:
        if self._stop.is_set():
            return
        self.controls.resume()
        self._stepping.clear()
        self._unpause()
        self._control("resume")
        if self.config.start_paused:  # resumed before its start (an attempt registered
            # stepped, its sandbox starting): it starts running. It paused at its start
            # (`run_start.py`) while its search ran, and stayed so.
            self.config = self.config.model_copy(update={"start_paused": False})
        for child in self._attempt_runs():
            child.resume()
        self.attempts.moved()  # a search's agent waiting for its attempts to stand still

    def step(self) -> StepOutcome:
        """Run exactly one agent action, then pause again.

        A paused search takes one action of one agent a step: its own next one where its
        agent waits for leave to take it (start, wait for or submit an attempt), else,
        while its agent waits on its attempts, the next action of one running attempt,
        each in turn (a1, a2, a1, ...), the step's `control` naming it. Stepping every
        running attempt at once made one `n` run as many actions as attempts, and the
        search's own as well. A search that runs freely is paused by it, each of its
        attempts after the action in hand, then itself once none moves (`settle`).

        A call waiting for approval is the action a step lets through, as a debugger's
        step runs the line it stands on: the step approves it, and the run pauses after
        it. Before, the step waited for a decision it never gave, so `n` at an approval
        moved nothing (the console alternated pause and step for ever).

        A run that runs (freely, or on a step) is not stopped mid-action: the action in
        hand (the model's turn and its call, or the call running) finishes, then the run
        pauses, recorded as a step's pause is; the step's `control` says so in its text.
        Before, a step then let one more action through first. Asked again before it
        paused, a step records nothing more (`pausing_already`): the console's key and
        `mlra ctl RUN step` both come here, so they agree (ctl recorded one each time).

        A search running freely pauses as a debugger's step over does: each running
        attempt finishes its action in hand and pauses at its next step boundary, and the
        search pauses once none moves while it waits on them (`settle`), or at its own
        next boundary; its step's `control` says so (`AFTER_ATTEMPTS`). It paused at
        once before, suspending every attempt's command mid-way."""
        if self._stop.is_set():
            return "none"
        waiting = self.controls.pending_calls()
        if waiting:
            self.controls.step()
            self._control("step")
            self.approve(waiting[0])  # resumes the clock: no longer held, not paused
            return "approved"
        if not self.controls.paused and self.state.pausing:  # asked already: it pauses once
            # Before the attempts' turn below: a search asked to pause after the actions in
            # hand is in step mode, and a second step there let an attempt already paused
            # take an action, recorded as a step of it that read as the search paused.
            return "pausing_already"
        children = self._attempt_children()
        stepping = self.controls.stepping
        # A paused search waiting on its attempts: the step is one attempt's action. One
        # running its own stepped action pauses after it (below): an attempt's step there
        # read as the search paused while it ran.
        if self.controls.paused and children and not self.controls.at_gate:
            attempt = next_in_turn(list(children), self._stepped_last)
            self._stepped_last = attempt
            self._control("step", target=attempt)
            self._stepping.add(attempt)
            self.clock.resume()  # the attempt's action is the search's time too
            children[attempt].step()
            return "attempt"
        if not self.controls.paused:  # running: it pauses after the action in hand
            self.controls.pause_after_action()  # on a step already: it does so anyway
            self._control("step", text=AFTER_ATTEMPTS if children else AFTER_ACTION)
            if not stepping:  # a search running freely: each attempt after its own
                for child in children.values():
                    child.pause_after_action(source="run")
            self.settle()
            return "after_attempts" if children else "after_action"
        self.controls.step()
        self._unpause()
        self._control("step")
        return "one_action"

    def pause_after_action(self, *, source: str) -> None:
        """A search's step while it runs, for one attempt: its action in hand finishes,
        then it pauses (the search's step does not approve a call waiting here, as a step
        of the attempt's own would). Nothing for a run that has ended, closing yet (still
        the search's child): its log took a step after its `run_finished`."""
        if self.controls.paused or self.state.pausing or self._stop.is_set():
            return
        if self.state.finished is not None:
            return
        self.controls.pause_after_action()
        self._control("step", text=AFTER_ACTION, source=source)

    def attempts_moving(self) -> bool:
        """Some attempt of this search runs on: not paused, its run not ended."""
        return any(not c.controls.paused and c.state.finished is None for c in self._attempt_runs())

    def settle(self) -> None:
        """A search asked to pause after the actions in hand (`step` while it ran) pauses
        once none of its attempts moves while its agent waits on them, recorded as a
        step's pause is: told when an attempt pauses or ends, and as a wait begins (its
        agent has no boundary of its own inside a wait, which lasts until an attempt
        ends: without this the search ran on, its clock with it, its attempts all paused)."""
        if self.controls.step_used_up() and self.attempts.waiting and not self.attempts_moving():
            self.pause(source="step")

    async def pause_at_boundary(self) -> None:
        """At the agent's step boundary, the action a step let through taken: the run
        pauses, recorded as a step's pause is. A search asked to pause after the actions
        in hand lets its attempts' end first (`AttemptManager.still`): its pause pauses
        them too, and cut them off mid-way."""
        if not self.controls.step_used_up():
            return
        await self.attempts.still(lambda: self.controls.step_used_up() and self.attempts_moving())
        if self.controls.step_used_up():
            self.pause(source="step")

    def attempt_step_done(self, attempt: str) -> None:
        """The action a step let `attempt` take is done (it paused again, or its run
        ended): the search's clock stands still again where no other is under way."""
        self.settle()  # it paused or ended: the search may pause now (`step` while it ran)
        self.attempts.moved()
        if attempt not in self._stepping:
            return
        self._stepping.discard(attempt)
        if not self._stepping and self.controls.paused:
            self.clock.pause()

    def _attempt_runs(self) -> list[Steering]:
        """The search's attempts' own runs running here (agent/loop/attempts.py), if any."""
        return list(self._attempt_children().values())

    def _attempt_children(self) -> dict[str, Steering]:
        """The search's attempts' own runs running here, by id."""
        children = self.attempts.children.items()
        return {a: c for a, c in children if isinstance(c, Steering)}

    def _unpause(self) -> None:
        if self.controls.holding():
            return  # held with a call that waits for approval (agent/loop/tool_step.py)
        self.clock.resume()
        if self.sandbox is not None:
            self.sandbox.resume_commands()

    def inject(self, target: str, text: str) -> None:
        self.controls.inject(target, text)
        self._control("inject", target=target, text=text)

    def set_breakpoints(self, breakpoints: list[Breakpoint]) -> None:
        """Raises ValueError, the breakpoints unchanged, where a rule would never fire."""
        for bp in breakpoints:
            if (problem := self.controls.breakpoint_problem(bp)) is not None:
                raise ValueError(f"breakpoint {bp.rule!r}: {problem}")
        self.controls.breakpoints = list(breakpoints)
        self._control(
            "breakpoints",
            text="; ".join(b.describe() for b in breakpoints) or "none",
            arguments={"rules": [b.rule for b in breakpoints]},
        )

    def approve(self, call_id: str) -> bool:
        if self.controls.decide(call_id, Decision("approve")):
            self._control("approve", call_id=call_id)
            return True
        return False

    def edit(self, call_id: str, arguments: dict[str, Any]) -> bool:
        """Run the waiting call with other arguments; a ValueError saying why where the
        tool would refuse them (the call still waits for a decision)."""
        if (problem := self.controls.edit_problem(call_id, arguments)) is not None:
            raise ValueError(problem)
        if self.controls.decide(call_id, Decision("edit", arguments=arguments)):
            self._control("edit", call_id=call_id, arguments=arguments)
            return True
        return False

    def reject(self, call_id: str, message: str = "") -> bool:
        if self.controls.decide(call_id, Decision("reject", message=message)):
            self._control("reject", call_id=call_id, text=message)
            return True
        return False

    def request_stop(self, *, evaluate: bool = True) -> None:
        """Stop now; evaluate what the workspace holds unless `evaluate` is False (quit)."""
        if self._stop.is_set():
            return
        self._control("stop" if evaluate else "quit")
        self._stop_ending = Ending(
            reason="stopped",
            status="finished" if evaluate else "stopped",
            evaluate=evaluate,
            by="stop",
            note="stopped by the user",
        )
        self.controls.close()
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    async def wait_for_stop(self) -> Ending:
        """The ending the user asked for, once they do."""
        await self._stop.wait()
        assert self._stop_ending is not None
        return self._stop_ending


def next_in_turn(attempts: list[str], last: str | None) -> str:
    """The attempt whose turn it is after `last`: the next by number (a2 after a1, a10
    after a9), from the first again past the last one."""

    def number(attempt: str) -> tuple[int, str]:
        digits = attempt.lstrip("a")
        return (int(digits) if digits.isdigit() else 0, attempt)

    ordered = sorted(attempts, key=number)
    if last is not None:
        later = [a for a in ordered if number(a) > number(last)]
        if later:
            return later[0]
    return ordered[0]
