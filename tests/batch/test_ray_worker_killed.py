"""An attempt Ray ended on a node that stayed up is labelled by Ray's error, not "node
lost" (slow: a real local Ray whose worker is killed under a run).

A killed Ray worker (WorkerCrashedError) and a run Ray's memory monitor killed
(OutOfMemoryError) were both "node lost", counted "lost with a node", though the node
was fine: a researcher looked for a dead machine instead of the run's memory.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from mlra.batch.executors.ray import RayExecutor, lost_outcome
from mlra.batch.report import write_report
from mlra.batch.run_ids import run_names
from mlra.batch.runner import BatchRunner
from mlra.batch.spec import expand
from mlra.batch.state import read_placements
from tests.batch.naming import batch_run_id
from tests.batch.ray_cluster import cmdline
from tests.batch.test_batch import MODEL, supervisor_fallback, worker_writing
from tests.batch.test_batch_ray import _spec, _until
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn

ray = pytest.importorskip("ray")


def test_ray_errors_label_the_attempt_by_what_ended_it() -> None:
    from ray.exceptions import NodeDiedError, OutOfMemoryError, WorkerCrashedError

    outcome, why = lost_outcome(OutOfMemoryError("Task was killed due to the node running low"))
    assert outcome == "out of memory"
    assert why.startswith("the node ran out of memory and Ray killed the run (OutOfMemoryError")
    assert lost_outcome(WorkerCrashedError())[0] == "worker died"
    assert lost_outcome(NodeDiedError("the node it was running on is dead"))[0] == "node lost"


def _ray_worker_running(marker: str) -> int | None:
    """The Ray worker process under which a command holding `marker` runs."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and marker in cmdline(int(proc.name)):
            pid = int(proc.name)
            while pid > 1:
                if cmdline(pid).startswith("ray::"):
                    return pid
                stat = (Path("/proc") / str(pid) / "stat").read_text()
                pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    return None


@pytest.mark.slow
async def test_a_killed_ray_worker_is_not_a_lost_node(
    local_ray: Path, tmp_path: Path, answer_task: Path
) -> None:
    out = tmp_path / "b"
    marker = "sleep 33.5"
    script = {
        "supervisor:fallback": supervisor_fallback(),
        "worker:fallback": turn("Waiting.", call("bash", command=marker, timeout=60)),
    }
    with ScriptedModelServer(script) as server:
        spec = _spec(answer_task, out, server, [MODEL])
        runner = BatchRunner(spec, expand(spec, run_names(out)), RayExecutor(out), out)
        batch = asyncio.create_task(runner.run())
        found: list[int] = []

        def worker() -> bool:
            pid = _ray_worker_running(marker)
            found[:] = [pid] if pid else []
            return bool(found)

        await _until(worker, 90, "the run's long command under a Ray worker")
        server.set_fallback("worker", worker_writing("42"))
        os.kill(found[0], signal.SIGKILL)
        progress = await asyncio.wait_for(batch, 180)
    run_id = batch_run_id(out, MODEL)
    assert progress.count("finished") == 1, progress.events
    assert progress.lost == 0  # no node was lost
    retired = sorted((out / "retired").glob("*")) if (out / "retired").is_dir() else []
    ended = [p for f in [*retired, out / "runs" / run_id] for p in read_placements(f)]
    assert [p.outcome for p in ended if p.outcome] == ["worker died"]
    assert any(e.startswith(f"worker died {run_id}") for e in progress.events), progress.events
    [group] = write_report(out, plots=False)
    assert group.lost_with_node == 0  # the report counts no node lost either
