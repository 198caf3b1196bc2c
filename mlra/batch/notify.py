"""`mlra batch --notify DEST`: the batch tells the user of each run's end and its own.

Sent by the batch process, on the machine the user started it on, never by the runs
(which may be on a Ray cluster's nodes): each run once it has ended for good (finished
with its score, unscored, or given up after its attempts), then the batch's end with
its counts and where its report is. Failures are one line each in the batch's closing
notes, never a failed batch. Destinations as agent/notify/ reads and sends them.
"""

from __future__ import annotations

from pathlib import Path

from mlra.agent.notify import Notification, parse_destinations
from mlra.agent.notify.dispatch import Dispatch
from mlra.batch.report_tables import score_text
from mlra.batch.state import RUNS, RunStatus


class BatchNotifications:
    def __init__(self, out: Path, written: list[str], notes: list[str]) -> None:
        self.out = out
        self.dispatch = Dispatch(
            [d for text in written for d in parse_destinations(text)], on_failure=notes.append
        )
        notes.extend(self.dispatch.warnings)

    @property
    def described(self) -> str:
        return self.dispatch.described

    def run_settled(self, status: RunStatus) -> None:
        """One run ended for good (its attempts are over)."""
        if status.kind in ("pending", "running", "interrupted"):
            return
        if status.score is not None:
            score = f"{status.metric or 'score'} = {score_text(status.score)}"
        else:
            score = f"no score ({status.reason or status.kind})"
        title = f"mlra batch: run {status.kind}" + (
            f", {status.metric or 'score'} = {score_text(status.score)}"
            if status.score is not None
            else ""
        )
        message = f"run {status.run_id} {status.kind} · {score}"
        self.dispatch.send(
            Notification(
                kind="finished",
                title=title,
                message=message,
                text=f"{title}: {message}",
                run_id=status.run_id,
                run_dir=str((self.out / RUNS / status.run_id).resolve()),
                status=status.kind,
                reason=status.reason or None,
                metric=status.metric or None,
                score=status.score,
            )
        )

    def batch_ended(self, statuses: list[RunStatus], total: int) -> None:
        counts: dict[str, int] = {}
        for status in statuses:
            counts[status.kind] = counts.get(status.kind, 0) + 1
        words = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
        title = f"mlra batch: ended, {counts.get('finished', 0)}/{total} finished"
        message = f"batch {self.out.name}: {words or 'no runs'} · report {self.out / 'report.md'}"
        self.dispatch.send(
            Notification(
                kind="batch_finished",
                title=title,
                message=message,
                text=f"{title}: {message}",
                run_id=self.out.name,
                run_dir=str(self.out.resolve()),
                counts=counts,
            )
        )

    async def drain(self) -> None:
        await self.dispatch.drain()
