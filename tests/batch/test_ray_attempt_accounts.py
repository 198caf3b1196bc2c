"""What a batch on Ray says of its attempts, as a cluster user reads it: a retry placed
on a node is still counted, an attempt's header says when it was queued, and an attempt
lost with its node is not said never to have started (issue 19)."""

from __future__ import annotations

from pathlib import Path

from mlra.batch.executors import Job
from mlra.batch.report import write_report
from mlra.batch.run_ids import run_names
from mlra.batch.runner import BatchRunner
from mlra.batch.spec import BatchSpec, expand
from tests.batch.naming import batch_run_id
from tests.batch.test_batch_ray import _LosesFirstAttempts


class _NotesRetriesWhenPlaced(_LosesFirstAttempts):
    """Notes the batch's retry count at the moment each attempt is placed on a node."""

    def __init__(self) -> None:
        super().__init__(1)
        self.runner: BatchRunner | None = None
        self.seen: list[int] = []

    async def run(self, job: Job, log_path: Path) -> int:
        if self.calls.get(job.run_id, 0) >= self.losses:  # the attempt after the loss
            job.placed("head (node cafe)")
            assert self.runner is not None
            self.seen.append(self.runner.progress.retries)
        return await super().run(job, log_path)


async def test_a_retried_run_placed_on_a_node_still_counts_its_retry(
    tmp_path: Path, answer_task: Path
) -> None:
    """The progress line dropped '1 retry' from the moment the retry was placed."""
    spec = BatchSpec(
        tasks=[str(answer_task)], models=["baseline"], isolation="none", max_attempts=2
    )
    executor = _NotesRetriesWhenPlaced()
    out = tmp_path / "b"
    runner = BatchRunner(spec, expand(spec, run_names(out)), executor, out)
    executor.runner = runner
    progress = await runner.run()
    assert progress.count("finished") == 1
    assert executor.seen == [1]


async def test_an_attempts_header_says_when_it_was_queued_not_that_it_started(
    tmp_path: Path, answer_task: Path
) -> None:
    """The header is written at queue time: on a busy cluster 'start 09:18:52' named a
    start 40 s before the run started (the node's line says when it did)."""
    spec = BatchSpec(tasks=[str(answer_task)], models=["baseline"], isolation="none")
    out = tmp_path / "b"
    await BatchRunner(spec, expand(spec, run_names(out)), _LosesFirstAttempts(0), out).run()
    log = out / "logs" / f"{batch_run_id(out, 'baseline')}.log"
    first = log.read_text().splitlines()[0]
    assert first.startswith("[mlra batch] attempt 1: start, queued ") and first.endswith(" UTC")


async def test_an_attempt_lost_with_its_node_is_not_said_to_have_never_started(
    tmp_path: Path, answer_task: Path
) -> None:
    """A run killed with its node after 6 s of work was listed under 'Never started'."""
    spec = BatchSpec(
        tasks=[str(answer_task)], models=["baseline"], isolation="none", max_attempts=2
    )
    out = tmp_path / "b"
    await BatchRunner(spec, expand(spec, run_names(out)), _LosesFirstAttempts(1), out).run()
    write_report(out, plots=False)
    report = (out / "report.md").read_text()
    assert "Never started" not in report
    assert "lost with its node before its run folder came back" in report
    run_id = batch_run_id(out, "baseline")
    assert f"- {run_id} (attempt 1): node lost: NodeDiedError: gone" in report
