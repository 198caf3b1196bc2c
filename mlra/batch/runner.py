"""Runs a batch: every run not yet done, through an executor, until each is
finished or has used up its attempts.

What to do with a run is decided from its folder each time (see `state`):
finished runs are skipped, runs that died mid-way are resumed (`mlra resume`),
failed runs are set aside and started afresh, each up to `max_attempts` starts.
A run that ended by itself without a score is not retried (see `state`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from mlra.batch.executors import AttemptLost, Executor, Job, NotPlaced
from mlra.batch.report_tables import score_text
from mlra.batch.run_logs import last_line, log_header
from mlra.batch.spec import BatchSpec, RunSpec, run_command
from mlra.batch.state import (
    ENDED,
    LOGS,
    NODE_LOST,
    RUNS,
    Placement,
    RunCard,
    RunStatus,
    add_placement,
    driving,
    lost_attempt,
    retire,
    retired_attempts,
    run_status,
    write_card,
)
from mlra.durations import format_duration
from mlra.exit_status import EXIT_API_UNREACHABLE, EXIT_SERVER_DOWN, EXIT_USAGE
from mlra.tools.sandbox.default_limits import beyond_reserve_mb

PASSED_ENV = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "MLRA_MODEL")
"""Model keys a run needs where it runs; they go to the `mlra run` process, as its own env."""


@dataclass
class Progress:
    """What the displays show; rebuilt from the run folders as runs start and end."""

    total: int
    statuses: dict[str, RunStatus] = field(default_factory=dict)
    active: set[str] = field(default_factory=set)
    """Runs this batch process has started and not yet seen end."""
    skipped: int = 0
    """Runs already finished when the batch started."""
    resumed: set[str] = field(default_factory=set)
    """Runs this batch took up again where they stopped (`mlra resume`)."""
    lost: int = 0
    """Attempts this batch saw end with their node (each one of its run's attempts)."""
    started_at: float = field(default_factory=time.monotonic)
    events: list[str] = field(default_factory=list)
    """What happened, in order ("start X", "finished X", ...), for the displays."""

    @property
    def last_event(self) -> str:
        return self.events[-1] if self.events else ""

    def count(self, kind: str) -> int:
        return sum(s.kind == kind for s in self.statuses.values())

    @property
    def gave_up(self) -> int:
        return sum(
            1 for s in self.statuses.values() if s.kind == "failed" and s.run_id not in self.active
        )

    @property
    def retries(self) -> int:
        """Attempts started afresh after failed ones, over every run."""
        return sum(s.retries for s in self.statuses.values())

    @property
    def running(self) -> int:
        """Runs whose log a live process holds (read from the logs, not assumed)."""
        return self.count("running")

    @property
    def queued(self) -> int:
        """Started by this batch but not yet running: waiting for resources or a Ray node."""
        return max(0, len(self.active) - self.running)

    @property
    def cost_usd(self) -> float:
        return sum(s.cost_usd for s in self.statuses.values())

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started_at


Listener = Callable[[Progress], None]


REFUSED = {
    EXIT_USAGE: "usage",
    EXIT_SERVER_DOWN: "server unreachable",
    EXIT_API_UNREACHABLE: "API unreachable",
}
"""Why a run was refused before it began, by its exit status: the report's failure."""
LOST_GRACE_S = 60.0
"""How long a lost attempt's run may still hold its log (on shared storage) before the
batch stops waiting for it."""
UNREACHABLE_WAIT_S = 10.0
"""The first wait before a run refused for an unreachable model server is tried again
(then twice that, up to `UNREACHABLE_MAX_WAIT_S` each)."""
UNREACHABLE_MAX_WAIT_S = 60.0
UNREACHABLE_BUDGET_S = 600.0
"""How long in all a run waits for its model server before the batch gives up on it:
a local server reloading its model after a crash takes minutes, not seconds."""


def _score_words(status: RunStatus) -> str:
    """What a finished run scored, for its line (": exact_match = 0.75")."""
    if status.score is None:
        return ""
    return f": {status.metric or 'score'} = {score_text(status.score)}"


class BatchRunner:
    def __init__(
        self,
        spec: BatchSpec,
        runs: list[RunSpec],
        executor: Executor,
        out: Path,
        *,
        listener: Listener | None = None,
        can_resume: bool = True,
        on_settled: Callable[[RunStatus], None] | None = None,
    ) -> None:
        self.spec = spec
        self.runs = runs
        self.executor = executor
        self.out = out
        self.listener = listener or (lambda _p: None)
        self.can_resume = can_resume
        self.on_settled = on_settled
        """Told of each run this batch drove once it has ended for good (`--notify`)."""
        """False carries an interrupted run on afresh instead of with `mlra resume`."""
        self.progress = Progress(total=len(runs))
        self.env = {k: v for k, v in os.environ.items() if k in PASSED_ENV}
        self.notes: list[str] = []
        self._no_resume: set[str] = set()
        """Runs `mlra resume` refused (exit 2): they start afresh instead."""
        self._unreachable: dict[str, tuple[int, float]] = {}
        """Each run refused because its model server did not answer: how many times in a
        row, and the seconds it has waited for it."""
        self.placed: dict[str, str] = {}
        """Runs the executor has started on a node, and where (running before their log
        is live here: a node that does not share the batch folder sends it at the end)."""
        self.free_mb: int | None = None
        """The runs disk's space free beyond its reserve when this batch started, where
        its runs share this machine: each run's default disk share is taken from it."""
        self.copies: dict[str, Path] = {}
        """Runs on a node without the batch folder: where their event logs are copied as
        they grow (their folders come back at their ends), read as their folders are."""

    def _changed(self, event: str = "") -> None:
        if event:
            self.progress.events.append(event)
        self.listener(self.progress)

    def refresh(self, run_id: str) -> RunStatus:
        status = run_status(self.out, run_id)
        self.progress.statuses[run_id] = status
        return status

    def next_job(self, run: RunSpec, status: RunStatus) -> Job | None:
        """The job that moves this run on, or None when it is done or given up."""
        if status.kind in ("finished", "unscored", "running"):
            return None
        if status.attempts >= self.spec.max_attempts:
            if status.kind in ("interrupted", "pending"):  # pending: its last attempt was lost
                status.kind = "failed"
            return None
        runs_dir = (self.out / RUNS).resolve()
        folder = run.task if Path(run.task).is_absolute() and Path(run.task).is_dir() else None

        def placed(where: str, run_id: str = run.run_id) -> None:
            self.placed[run_id] = where
            # Its retries stay counted while it runs (they are the retired attempts).
            retries = len(retired_attempts(self.out, run_id))
            self.progress.statuses[run_id] = RunStatus(
                run_id, "running", attempts=status.attempts, retries=retries
            )
            self._changed(f"running {run_id} on {where}")

        def copied(folder: Path, run_id: str = run.run_id) -> None:
            self.copies[run_id] = folder

        if status.kind == "interrupted" and self.can_resume and run.run_id not in self._no_resume:
            self.progress.resumed.add(run.run_id)
            args = ["resume", str(runs_dir / run.run_id), "--no-tui"]
            if self.spec.base_url and run.model != "baseline":
                args += ["--base-url", self.spec.base_url]
            return Job(
                run.run_id,
                args,
                run.resources,
                True,
                self.env,
                task_folder=folder,
                placed=placed,
                copied=copied,
            )
        if status.kind in ("failed", "interrupted"):
            retire(self.out, run.run_id)
        command = run_command(
            run,
            self.spec,
            runs_dir,
            python="python",
            shared_by=self.shared_by,
            free_mb=self.free_mb,
        )
        return Job(
            run.run_id,
            command[3:],
            run.resources,
            env=self.env,
            task_folder=folder,
            placed=placed,
            copied=copied,
        )

    @cached_property
    def shared_by(self) -> int:
        """Runs sharing this machine's defaults: `--parallel` at once here (Ray places
        runs on nodes of their own), of those left to do as the batch starts."""
        if self.spec.executor != "local":
            return 1
        left = sum(run_status(self.out, r.run_id).kind not in ENDED for r in self.runs)
        return max(1, min(self.spec.parallel or left, left))

    async def _drive(self, run: RunSpec, slots: asyncio.Semaphore) -> None:
        while True:
            status = self.refresh(run.run_id)
            job = self.next_job(run, status)
            if job is None:
                self.progress.active.discard(run.run_id)
                self._changed()
                return
            async with slots:
                self.progress.active.add(run.run_id)
                # "running" once its log is live (the ticker sees it); until then it is queued.
                self.progress.statuses[run.run_id] = RunStatus(
                    run.run_id, "pending", attempts=status.attempts, retries=status.retries
                )
                self._changed(f"{'resume' if job.resume else 'queue'} {run.run_id}")
                log_path = self.out / LOGS / f"{run.run_id}.log"
                log_header(log_path, status.attempts + 1, job)
                try:
                    code = await self.executor.run(job, log_path)
                except NotPlaced as exc:
                    with open(log_path, "a", encoding="utf-8") as log:
                        log.write(f"[mlra batch] not placed: {exc}\n")
                    status = self.refresh(run.run_id)
                    status.kind, status.reason, status.detail = "failed", "resources", str(exc)
                    if not (self.out / RUNS / run.run_id).exists():
                        self._card(run, status)  # the report's row for this refusal
                    self._changed(f"failed (resources) {run.run_id}: {exc}")
                    return
                except AttemptLost as exc:
                    await self._settled(run.run_id)
                    self._lost(run.run_id, status, exc)
                    continue
                finally:
                    self.progress.active.discard(run.run_id)
                    self.placed.pop(run.run_id, None)
                    self.copies.pop(run.run_id, None)
            before = status
            status = self.refresh(run.run_id)
            if code in REFUSED and status.attempts == before.attempts:
                refused = last_line(log_path)
                if code == EXIT_SERVER_DOWN:
                    wait = self._server_wait(run.run_id, refused)
                    if wait is not None:
                        await asyncio.sleep(wait)
                        continue
                if job.resume and code != EXIT_USAGE:
                    # Its folder stays as it is: run again once the server answers (or the
                    # machine is online), the batch resumes it (set aside and started
                    # afresh, its progress would be lost to a server that was only down).
                    status.detail = refused
                    self.progress.resumed.discard(run.run_id)
                    self._changed(f"interrupted {run.run_id}, not resumed: {refused}")
                    return
                # Refused before it began: trying the same command again would loop.
                if job.resume:
                    self._no_resume.add(run.run_id)
                    self.progress.resumed.discard(run.run_id)
                    continue
                # A server that never answered is no bad input: said as what it was, with
                # how long the batch waited for it (a vendor's API on a machine with no
                # network: not waited for, nothing the batch's minutes would mend).
                reason = REFUSED[code]
                status.kind, status.reason = "failed", reason
                status.detail = refused + self._waited_words(run.run_id)
                self._card(run, status)
                self._changed(f"failed ({reason}) {run.run_id}: {refused}")
                return
            self._unreachable.pop(run.run_id, None)  # it got past its server's door
            what = (
                status.kind
                if status.kind in ("finished", "running")
                else (f"{status.kind} ({status.reason})")
            )
            self._changed(f"{what} {run.run_id}{_score_words(status)}")

    def _server_wait(self, run_id: str, refused: str) -> float | None:
        """How long to wait before trying again a run refused because its model server
        did not answer, or None once it has waited `UNREACHABLE_BUDGET_S` in all. Unlike
        a bad command, a server restarting (a local vLLM after a crash, reloading its
        model) answers again, and an unattended batch should not lose the runs that
        came due meanwhile."""
        tries, waited = self._unreachable.get(run_id, (0, 0.0))
        if waited >= UNREACHABLE_BUDGET_S or self.spec.max_attempts <= 1:
            return None  # `--max-attempts 1`: each run is tried once, whatever refused it
        wait = min(
            UNREACHABLE_WAIT_S * 2**tries, UNREACHABLE_MAX_WAIT_S, UNREACHABLE_BUDGET_S - waited
        )
        self._unreachable[run_id] = (tries + 1, waited + wait)
        self._changed(f"server unreachable for {run_id}: trying again in {wait:g} s ({refused})")
        return wait

    def _waited_words(self, run_id: str) -> str:
        """How long the batch waited for the run's model server, where it did."""
        tries, waited = self._unreachable.pop(run_id, (0, 0.0))
        if not tries:
            return ""
        return f" (refused {tries + 1} times while the batch waited {format_duration(waited)})"

    async def _drive_to_end(self, run: RunSpec, slots: asyncio.Semaphore) -> None:
        with driving(self.out, run.run_id) as mine:
            if mine:
                await self._drive(run, slots)
            elif self.refresh(run.run_id).kind != "running":  # a live one was said already
                self.notes.append(f"{run.run_id} is driven by another mlra batch; left alone")
        status = self.progress.statuses.get(run.run_id)
        if self.on_settled is not None and status is not None:
            self.on_settled(status)

    async def _settled(self, run_id: str) -> None:
        """Wait for a lost attempt's run to let go of its log (its process dies with its
        worker a moment after the node is lost), so that it is resumed, not left alone."""
        deadline = time.monotonic() + LOST_GRACE_S
        while time.monotonic() < deadline:  # a lock on another machine: nothing to wait on but time
            if run_status(self.out, run_id).kind != "running":
                return
            await asyncio.sleep(0.5)

    def _lost(self, run_id: str, before: RunStatus, exc: AttemptLost) -> None:
        """Count the lost attempt (its folder's, or a retired folder of its placement)."""
        placement = exc.args[0] if exc.args and isinstance(exc.args[0], Placement) else None
        placement = placement or Placement(node_id="", host="(not placed)", outcome=NODE_LOST)
        after = run_status(self.out, run_id)
        if after.attempts > before.attempts and (self.out / RUNS / run_id).is_dir():
            add_placement(self.out / RUNS / run_id, placement)
        else:  # nothing of it reached the batch folder: a retired folder says it was tried
            lost_attempt(self.out, run_id, placement)
        status = self.refresh(run_id)
        self.progress.lost += placement.outcome == NODE_LOST  # not a run killed on a live node
        left = self.spec.max_attempts - status.attempts
        self._changed(
            f"{placement.outcome or NODE_LOST} {run_id} ({placement.detail or placement.where}); "
            + (
                f"queued again, {left} attempt{'s' if left != 1 else ''} left"
                if left > 0
                else "no attempts left"
            )
        )

    def _card(self, run: RunSpec, status: RunStatus | None = None) -> None:
        """The run's card; with why it never started, when it did not."""
        card = RunCard(run_id=run.run_id, task=run.task_label, model=run.model, seed=run.seed)
        if status is not None:
            card.not_started, card.detail = status.reason, status.detail
        write_card(self.out, card)

    async def run(self) -> Progress:
        (self.out / RUNS).mkdir(parents=True, exist_ok=True)
        if self.shared_by > 1:
            # Measured once, before any run reserves its volume: measured by each run as it
            # started, each got a share of what the others had left by then (4.8 GB and
            # 1.6 GB, two seeds of one batch).
            self.free_mb = beyond_reserve_mb(self.out / RUNS)
        slots = asyncio.Semaphore(self.spec.parallel or len(self.runs) or 1)
        drivers = []
        for run in self.runs:
            status = self.refresh(run.run_id)
            if status.kind in ENDED:
                self.progress.skipped += 1
            elif status.kind == "running":
                self.notes.append(f"{run.run_id} is live in another process; left alone")
            reason = self.executor.cannot_hold(run.resources)
            if reason and status.kind not in ENDED:
                status.kind, status.reason, status.detail = "failed", "resources", reason
                if not (self.out / RUNS / run.run_id).exists():
                    self._card(run, status)
                self.progress.events.append(f"refused {run.run_id}: {reason}")
                continue
            self._card(run)  # a refusal an earlier batch recorded no longer holds
            drivers.append(self._drive_to_end(run, slots))
        self._changed("batch started")
        ticker = asyncio.create_task(self._tick())
        tasks = [asyncio.ensure_future(d) for d in drivers]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            # Stopped (Ctrl-C, SIGTERM): gather ends as soon as one run's driver does (a
            # run still queued, at once), while the others are still stopping their runs.
            # Ended there, the batch was cancelled again by asyncio.run's cleanup, and a run
            # on Ray was force-cancelled, killed without recording its stop (nor brought
            # back from a node without the batch folder). Each is waited for.
            for task in tasks:
                if not task.cancelling():  # a second cancel would cut its stop short
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            ticker.cancel()
        self._changed("batch ended")
        return self.progress

    async def _tick(self) -> None:
        """Live cost and elapsed time of the runs in flight, once a second."""
        while True:
            await asyncio.sleep(1.0)
            for run_id in list(self.progress.active):
                status = run_status(self.out, run_id, copy=self.copies.get(run_id))
                if status.kind != "running" and run_id in self.placed:
                    continue  # on a node whose folder comes back at its end, its log not yet here
                if status.kind in ("running", "pending"):
                    was = self.progress.statuses.get(run_id)
                    self.progress.statuses[run_id] = status
                    if status.kind == "running" and (was is None or was.kind != "running"):
                        self.progress.events.append(f"running {run_id}")
            self._changed()
