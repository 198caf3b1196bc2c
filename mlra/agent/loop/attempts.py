"""Attempts: the nodes of a search, each a run of its own inside this one.

An attempt is a worker subtask (or, with no model, one variant of the task's recipe)
in a run folder of its own, `attempts/<id>/` in this run's: its own log, its own
workspace, started from the task's starter or as a copy of another attempt's
workspace as that one ended, and its own sandbox, which hides the runs folder, so no
attempt reads another's files. It ends with its artifact validated on the task's
hidden validation split (agent/agents/attempt_agent.py), and its best validated copy is kept:
what `submit(attempt=...)` grades.

Reusing the run for the attempt gives it everything a run has for free: its log and
transcript (the console opens it), its snapshots, its limits, and resume: an attempt
running when mlra died is resumed from its own log when this run is, as `mlra resume`
would, so nothing it did is lost.

This run records each attempt with `attempt_started` and `attempt_finished`, written
as the run's own observations (as jobs are), past any catch-up: the tree is folded from
them (agent/record/attempt_tree.py). The manager is the one place attempts are started,
waited on and stopped: by the supervisor's tools (tools/attempts.py), the greedy
policy (agent/agents/search.py) and the person at the console.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from mlra import events as ev
from mlra.agent.loop.attempt_finish import finished_event
from mlra.agent.loop.attempt_time import closing_reserve, raised_limits, short_share, sync_limit
from mlra.agent.loop.run_context import RunContext
from mlra.agent.record.attempt_tree import AttemptTree
from mlra.agent.setup.run_budget import BudgetSpent, attempt_share, held_mb, own_share

ATTEMPTS_DIR = "attempts"
STOP_REASON_DEADLINE = "the run ended"


class AttemptRefused(Exception):
    """Why an attempt cannot be started, stopped or submitted: one line for the agent."""


class Launcher(Protocol):
    """Runs an attempt's own run to its end (agent/agents/attempt_runs.py): made in `run_dir`, or,
    `resume`, taken up from its log there; registers it with the manager while it runs.
    Raises CancelledError when stopped. Set by `agent_for` on a run that searches, so this
    module needs nothing of the controller the attempts' runs are made of."""

    def __call__(
        self, manager: AttemptManager, started: ev.AttemptStarted, run_dir: Path, resume: bool
    ) -> Awaitable[None]: ...


class AttemptManager:
    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.launcher: Launcher | None = None
        """How attempts run; None in a run that does not search (nothing can start)."""
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.children: dict[str, Any] = {}
        """The attempts' own runs (their controllers) while they run here, by id."""
        self._finished = asyncio.Condition()
        self._closing = False
        self._stopped: dict[str, str] = {}
        """Why each attempt stopped here was stopped, by id."""
        self._at_deadline: set[str] = set()
        """Those the run's deadline stopped (`stop_all`), none a person had stopped first."""
        self._held_mb: dict[str, int] = {}
        """What each ended attempt's folder holds on disk (MB), measured once: its
        `attempt_finished` is written after its run closed its sandbox (its volume
        carried back, the image deleted), even one stopped as its sandbox starts or
        closes (tests/agent/test_search_stopped_starting.py)."""
        self.waiting = False
        """The run's agent waits on its attempts (`wait`): a boundary of the search's own
        where a step while it ran lets it pause (agent/control/steering.py `settle`)."""
        self._moved = asyncio.Event()
        """Set when an attempt paused or ended, or the run resumed (`still`)."""

    # --- reading the tree -----------------------------------------------------------------

    @property
    def tree(self) -> AttemptTree:
        return self.run.state.attempts

    @property
    def folder(self) -> Path:
        return self.run.run_dir / ATTEMPTS_DIR

    def child(self, attempt: str) -> Any:
        """The attempt's own run (its controller) while it runs here, else None: the
        console messages an attempt through it."""
        return self.children.get(attempt)

    def table(self) -> str:
        """The tree as the supervisor reads it (agent/record/attempt_tree.py)."""
        return self.tree.render(self.run.clock.elapsed())

    def running(self) -> list[str]:
        return [n.id for n in self.tree.running]

    def left(self) -> int:
        return max(0, self.run.config.attempts - len(self.tree))

    def slots(self) -> int:
        return max(0, self.run.config.attempts_parallel - len(self.tree.running))

    def time_share(self) -> float:
        """The run-clock seconds a new attempt gets: what is left, shared between the
        attempts still to come and those running now as they can run (K at a time), the
        forecast a search plans by. A supervisor may ask for less. The running ones
        count: the second of three attempts, two at a time, started beside the first,
        got the whole time left (the first wave's half, it was the last "to come" in
        its wave by the count of those not started), leaving the third none."""
        usable = self.usable()
        unfinished = self.left() + len(self.tree.running)
        waves = max(1, math.ceil(unfinished / self.run.config.attempts_parallel))
        # Never less than an attempt needs while the run has that left, the reserve
        # included: more attempts than the time can hold (--attempts 100 in 10 minutes,
        # 6 s each) ran none at all, and one in 31 s none (27.9 s past the reserve).
        remaining = self.run.clock.remaining()
        return max(0.0, min(remaining, max(usable / waves, self.min_time())))

    def usable(self) -> float:
        """The run's time left less the reserve its end keeps for the closing
        validations (agent/loop/attempt_time.py `closing_reserve`)."""
        return max(0.0, self.run.clock.remaining() - self.reserve())

    def reserve(self) -> float:
        seen = [v.duration_s for v in self.run.state.validations]
        seen += [n.finished.validation_s for n in self.tree.nodes.values() if n.finished]
        for child in self.children.values():  # an attempt running: its validations so far
            seen += [v.duration_s for v in child.state.validations]
        task = self.run.task
        return closing_reserve(self.run.clock.limit_s, task.evaluator.timeout, seen)

    def min_time(self) -> float:
        """The least time an attempt is started with (`--attempt-min-time`, 30 s)."""
        return self.run.config.attempt_min_s

    # --- starting -------------------------------------------------------------------------

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
        """Start an attempt: its id, and the notice where it starts with less time than
        its parent took (`short_share`), which its starter reads too. Raises
        AttemptRefused with why it may not."""
        self.adopt()
        tree = self.tree
        if self.launcher is None:
            raise AttemptRefused("this run does not search over attempts (--search)")
        if self._closing or self.run.state.finished is not None:
            raise AttemptRefused("the run is ending: no attempt can start")
        if not self.left():
            raise AttemptRefused(
                f"all {self.run.config.attempts} attempts this run may make were started "
                "(--attempts); submit one"
            )
        if not self.slots():
            running = ", ".join(n.id for n in tree.running)
            raise AttemptRefused(
                f"{self.run.config.attempts_parallel} attempts are running already "
                f"({running}; --attempts-parallel): wait for one with attempt_wait"
            )
        if parent is not None:
            node = tree.get(parent)
            if node is None:
                known = ", ".join(tree.nodes) or "none yet"
                raise AttemptRefused(f"no attempt {parent!r} (the attempts: {known})")
            if node.finished is None:
                raise AttemptRefused(
                    f"attempt {parent} is still running: start from it once it has ended"
                )
            if not (self.folder / parent / "workspace").is_dir():
                raise AttemptRefused(f"attempt {parent}'s workspace is gone")
        share, least = self.time_share(), self.min_time()
        if time_limit_s and time_limit_s < least:
            raise AttemptRefused(
                f"time_limit {time_limit_s:.0f} s is less than the {least:.0f} s an attempt needs"
            )
        limit = min(share, time_limit_s) if time_limit_s else share
        if limit < least:
            raise AttemptRefused(
                f"{limit:.0f} s of the run's time are left, less than the {least:.0f} s "
                "an attempt needs; submit the best one"
            )
        budget_share = self.budget_share()
        attempt = f"a{len(tree) + 1}"
        started = ev.AttemptStarted(
            attempt=attempt,
            parent=parent,
            operator=operator,
            instructions=instructions,
            variant=dict(variant or {}),
            folder=f"{ATTEMPTS_DIR}/{attempt}",
            time_limit_s=round(limit, 3),
            time_asked_s=round(limit, 3) if limit < share else None,
            raised=self._raised(share),
            share=budget_share,
            reserve_s=self.reserve(),
            call_id=call_id,
        )
        self.run.append(started)
        if (notice := short_share(tree, started, self.run.task.baseline.vars)) is not None:
            self.run.append(notice)
        for other in started.raised:
            self.sync_limit(other, why=f"attempt {attempt} started with a larger share")
        self._launch(started, resume=False)
        return attempt, notice

    def _raised(self, share: float) -> dict[str, float]:
        clock = self.run.clock
        return raised_limits(self.tree, self.children, share, self.usable(), clock.elapsed())

    def sync_limit(self, attempt: str, why: str = "") -> None:
        """Its own run takes its limit as the tree has it (agent/loop/attempt_time.py):
        as a raise is recorded (`why` it was), and as its run, made in a thread, begins."""
        node, child = self.tree.get(attempt), self.children.get(attempt)
        if node is not None and child is not None:
            sync_limit(node, child, why)

    def budget_share(self) -> ev.Budget | None:
        """A new attempt's share of the run's budget (agent/setup/run_budget.py): the disk what
        the run's workspace and the ended attempts' folders (kept: later attempts copy
        from them) leave. Raises AttemptRefused when the disk budget is spent."""
        budget = self.run.state.budget
        if budget is None:
            return None
        for node in self.tree.nodes.values():  # an ended one's folder no longer changes
            if node.finished is not None and node.id not in self._held_mb:
                self._held_mb[node.id] = held_mb([self.folder / node.id])
        running = [n.started.share for n in self.tree.running if n.started.share]
        try:
            return attempt_share(
                budget,
                parallel=self.run.config.attempts_parallel,
                running=running,
                held_mb=self._runs_own_mb(budget) + sum(self._held_mb.values()),
            )
        except BudgetSpent as exc:
            raise AttemptRefused(str(exc)) from None

    def _runs_own_mb(self, budget: ev.Budget) -> int:
        """What the run's own workspace takes of the disk budget: its share, reserved
        whole where it is a volume (run_budget.own_share), else what it holds."""
        own = own_share(budget, self.run.config).disk_mb
        if own is not None and own != budget.disk_mb:
            return own
        return held_mb([self.run.workspace])

    def _launch(self, started: ev.AttemptStarted, *, resume: bool) -> None:
        task = asyncio.get_running_loop().create_task(
            self._run_attempt(started, resume=resume), name=f"attempt-{started.attempt}"
        )
        self._tasks[started.attempt] = task

    def adopt(self) -> None:
        """Take up the attempts the log leaves running that no task here runs: a resumed
        run's, from their own logs. Called once live, and before any use of the tree."""
        if self.run.catchup.replaying or self._closing or self.launcher is None:
            return
        for node in self.tree.running:
            if node.id not in self._tasks:
                self._launch(node.started, resume=True)

    async def _run_attempt(self, started: ev.AttemptStarted, *, resume: bool) -> None:
        attempt = started.attempt
        run_dir = self.folder / attempt
        stopped = lost = ""
        at_deadline = False
        try:
            assert self.launcher is not None
            await self.launcher(self, started, run_dir, resume)
        except asyncio.CancelledError:
            stopped = self._stopped.get(attempt, STOP_REASON_DEADLINE)
            at_deadline = attempt in self._at_deadline
        except AttemptRefused as exc:  # its workspace copy would not fit: one line
            stopped = str(exc)
        except Exception as exc:  # its own log says the rest
            lost = f"the attempt could not run: {self._no_host_path(str(exc))}"
        finally:
            self.children.pop(attempt, None)
        finished = await asyncio.to_thread(
            finished_event,
            started,
            run_dir,
            self.run.run_dir,
            stopped=stopped,
            lost=lost,
            run_deadline=at_deadline,
        )
        with contextlib.suppress(Exception):  # the run's log closed under it: the run ended
            self.run.append(finished)
        async with self._finished:
            self._finished.notify_all()

    def _no_host_path(self, text: str) -> str:
        """An error's text as the supervisor may read it: the run folder's host path out."""
        for folder, shown in ((self.folder, "attempts"), (self.run.run_dir, "the run folder")):
            text = text.replace(str(folder), shown)
        return text

    # --- waiting and stopping ---------------------------------------------------------------

    async def wait(self, attempt: str | None, timeout_s: float) -> list[str]:
        """Wait until `attempt` (None: any running one) has ended or `timeout_s` passed;
        the ids of those that ended meanwhile (a named one that had ended already: it)."""
        self.adopt()
        tree = self.tree
        if attempt is not None:
            node = tree.get(attempt)
            if node is None:
                raise AttemptRefused(f"no attempt {attempt!r}")
            if node.finished is not None:
                return [attempt]  # it has ended: waiting for it is over at once
            watched = [attempt]
        else:
            watched = [n.id for n in tree.running]
        if not watched:
            return []
        self.waiting = True
        if not self.run.catchup.replaying:
            # A step's action is this wait, on attempts paused with the run (or a step
            # while it ran, theirs in hand ended): the run pauses too, so its clock
            # stands still while nothing moves (`n` then steps an attempt).
            self.run.settle()

        def ended() -> list[str]:
            return [a for a in watched if (n := tree.get(a)) is not None and n.finished]

        async def until() -> None:
            async with self._finished:
                await self._finished.wait_for(lambda: bool(ended()))

        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(until(), timeout=max(0.0, timeout_s))
        finally:
            self.waiting = False
        return ended()

    def moved(self) -> None:
        """An attempt paused or ended, or the run resumed: `still` looks again."""
        self._moved.set()

    async def still(self, moving: Callable[[], bool]) -> None:
        """Wait while `moving()` (a search asked to pause after the actions in hand, its
        attempts' not all ended), so its pause at its own boundary does not cut them off."""
        while moving():
            self._moved.clear()
            await self._moved.wait()

    async def stop(self, attempt: str, reason: str = "stopped by the supervisor") -> None:
        """Stop a running attempt; its `attempt_finished` says "stopped" and why."""
        task = self.stop_now(attempt, reason)
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    def stop_now(self, attempt: str, reason: str) -> asyncio.Task[None] | None:
        """`stop` at once, for a person's stop (agent/control/steering.py): checked, its
        reason recorded and its task cancelled before anything else runs, so a run's
        end that follows finds it stopped by them; the task to await, if any. Refused
        once the run is ending (`stop_all`): the run's end stops it, and says by what (a
        person's stop pressed then read "out of time", by the run's deadline)."""
        self.adopt()
        node = self.tree.get(attempt)
        if node is None:
            raise AttemptRefused(f"no attempt {attempt!r}")
        if node.finished is not None:
            raise AttemptRefused(f"attempt {attempt} has already ended ({node.status})")
        if self._closing:
            raise AttemptRefused("the run is ending: its end stops every attempt still running")
        self._stopped[attempt] = reason
        task = self._tasks.get(attempt)
        if task is None or task.done():
            return None
        task.cancel()
        return task

    @property
    def closing(self) -> bool:
        """The run is ending (`stop_all` begun): no attempt starts, nor is stopped apart."""
        return self._closing

    async def stop_all(self, reason: str = STOP_REASON_DEADLINE, *, deadline: bool = False) -> None:
        """The run is ending: every attempt still running is stopped, and recorded so;
        `deadline`: by the run's time limit, which their `attempt_finished` says, not as
        a person's stop (one a person stopped already stays so)."""
        self._closing = True
        running = {a: t for a, t in self._tasks.items() if not t.done()}
        for attempt, task in running.items():
            if deadline and attempt not in self._stopped:
                self._at_deadline.add(attempt)
            self._stopped.setdefault(attempt, reason)
            if not task.cancelling():  # one stopped already is ending: cancelled again, it
                task.cancel()  # lost its `attempt_finished`, being written
        await asyncio.gather(*running.values(), return_exceptions=True)

    # --- submitting ------------------------------------------------------------------------

    def submittable(self, attempt: str) -> ev.AttemptFinished:
        """The attempt's `attempt_finished`, if it may be submitted; raises AttemptRefused
        with why not (see `submittable`)."""
        return submittable(self.tree, self.run.run_dir, attempt)


def submittable(tree: AttemptTree, run_dir: Path, attempt: str) -> ev.AttemptFinished:
    """The attempt's `attempt_finished`, if it may be submitted (it ended validated, its
    frozen copy kept); raises AttemptRefused with why not. From the tree and the run
    folder alone, so a console attached from another process judges as the run does."""
    node = tree.get(attempt)
    if node is None:
        known = ", ".join(tree.nodes) or "none yet"
        raise AttemptRefused(f"no attempt {attempt!r} (the attempts: {known})")
    if node.finished is None:
        raise AttemptRefused(f"attempt {attempt} is still running: wait for it first")
    if node.finished.kept is None:
        raise AttemptRefused(
            f"attempt {attempt} has no validated artifact ({node.status}"
            + (f": {node.finished.why}" if node.finished.why else "")
            + ")"
        )
    if not (run_dir / node.finished.kept).exists():
        raise AttemptRefused(f"attempt {attempt}'s validated copy is gone")
    return node.finished
