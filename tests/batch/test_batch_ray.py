"""The Ray executor: on a real local Ray started in the test (slow: runs as Ray
tasks writing into the shared batch folder, a batch stopped mid-way and run
again, run folders and task folders moved for a node that does not share the
storage), and without one (fast: what a cluster's nodes can hold, placement a
batch asks for, folders moved in parts, a bad address, lost attempts counted, a
report of runs that never had a folder). Two-node clusters are in
test_ray_cluster.py."""

from __future__ import annotations

import asyncio
import importlib.util
import io
import json
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import log_is_live, read_events
from mlra.batch.executors import AttemptLost, Job
from mlra.batch.executors.local import Capacity, LocalExecutor
from mlra.batch.executors.ray import RayExecutor
from mlra.batch.executors.ray_connect import infeasible, request_of
from mlra.batch.executors.shipping import (
    CHUNK,
    cached,
    content_hash,
    file_chunks,
    pack,
    stream_tar,
    unpack,
)
from mlra.batch.progress import PlainProgress
from mlra.batch.report import write_report
from mlra.batch.run_ids import run_names
from mlra.batch.runner import BatchRunner, Progress
from mlra.batch.spec import BatchError, BatchSpec, expand, parse_spec
from mlra.batch.state import Placement, RunCard, read_placements, run_status, write_card
from tests.batch.naming import batch_run_id
from tests.batch.test_batch import MODEL, supervisor_fallback, worker_writing
from tests.conftest import mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn

ray = pytest.importorskip("ray")  # the executor imports it

slow = pytest.mark.slow
"""A local Ray takes some 10 s to start here: the tests that use one are slow."""


def _spec(
    answer_task: Path, out: Path, server: ScriptedModelServer, models: list[str]
) -> BatchSpec:
    return BatchSpec(
        tasks=[str(answer_task)],
        models=models,
        seeds=1,
        executor="ray",
        out=out,
        base_url=server.url_for("openai"),
        isolation="none",
        max_attempts=2,
    )


async def _until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


@slow
async def test_a_batch_on_ray_stopped_and_run_again(
    local_ray: Path, tmp_path: Path, answer_task: Path
) -> None:
    out = tmp_path / "b"
    script = {
        "supervisor:fallback": supervisor_fallback(),
        "worker:fallback": turn("Waiting.", call("bash", command="sleep 20", timeout=60)),
    }
    with ScriptedModelServer(script) as server:
        spec = _spec(answer_task, out, server, ["baseline", MODEL])
        runs = expand(spec, run_names(out))
        executor = RayExecutor(out)
        llm_id, baseline_id = batch_run_id(out, MODEL), batch_run_id(out, "baseline")
        llm_log = out / "runs" / llm_id / "events.jsonl"

        def hanging() -> bool:
            return llm_log.is_file() and any(
                isinstance(e, ev.ToolCall) and e.tool == "bash" for e in read_events(llm_log)
            )

        first = BatchRunner(spec, runs, executor, out, can_resume=False)
        batch = asyncio.create_task(first.run())
        await _until(lambda: (out / "runs" / baseline_id / "result.json").exists(), 60, "baseline")
        await _until(hanging, 60, "the model run's long command")
        batch.cancel()  # the batch stops: the run is told to stop and records it, resumable
        with pytest.raises(asyncio.CancelledError):
            await batch
        await _until(lambda: not log_is_live(llm_log), 30, "the run to end")
        assert run_status(out, llm_id).kind == "interrupted"

        server.set_fallback("worker", worker_writing("42"))
        second = BatchRunner(spec, runs, executor, out)
        progress = await second.run()
        assert progress.skipped == 1 and progress.count("finished") == 2
        if second.can_resume:  # carried on in its own folder
            assert any(isinstance(e, ev.RunResumed) for e in read_events(llm_log))
        else:  # started afresh, the dead attempt set aside
            assert (out / "retired" / f"{llm_id}__a1").is_dir()
        assert "run finished (submitted)" in (out / "logs" / f"{llm_id}.log").read_text()
        groups = write_report(out, plots=False)
        assert [(g.model, g.runs, g.score_mean) for g in groups] == [
            ("baseline", 1, 1.0),
            (MODEL, 1, 1.0),
        ]


@slow
async def test_run_folders_come_back_from_a_node_without_the_shared_storage(
    local_ray: Path, tmp_path: Path, answer_task: Path
) -> None:
    out = tmp_path / "b"
    with ScriptedModelServer({}) as server:
        spec = _spec(answer_task, out, server, ["baseline"])
        executor = RayExecutor(out)
        executor.token = "another-batch"  # the node finds no token of ours: not shared storage
        runs = expand(spec, run_names(out))
        progress = await BatchRunner(spec, runs, executor, out, can_resume=False).run()
    assert progress.count("finished") == 1
    run_dir = out / "runs" / batch_run_id(out, "baseline")
    result = json.loads((run_dir / "result.json").read_text())
    assert result["score"] == 1.0
    assert (run_dir / "workspace" / "answer.txt").read_text() == "42\n"
    # The task folder went to the node by its content hash, hidden files and all, into
    # the node's cache (not the workspace); where the run ran is in its result and log.
    [copy] = list(local_ray.iterdir())
    assert (copy / "task.toml").is_file()
    workspace = run_dir / "workspace"
    assert not any(p.name in ("check.py", "expected.txt") for p in workspace.rglob("*"))
    node_id = ray.get_runtime_context().get_node_id()
    assert result["node"]["node_id"] == node_id
    [placement] = json.loads((run_dir / "placement.json").read_text())
    assert placement["node_id"] == node_id and placement["outcome"] == ""
    log = (out / "logs" / f"{run_dir.name}.log").read_text()
    assert log.startswith("[mlra batch] attempt 1: start")
    assert f"[mlra batch] on {result['node']['host']} (node {node_id[:8]})" in log


@slow
async def test_a_run_on_a_node_without_the_batch_folder_is_stopped_brought_back_and_resumed(
    local_ray: Path, tmp_path: Path, answer_task: Path
) -> None:
    out = tmp_path / "b"
    run_id = batch_run_id(out, MODEL)
    script = {
        "supervisor:fallback": supervisor_fallback(),
        "worker:fallback": turn("Waiting.", call("bash", command="sleep 30", timeout=60)),
    }
    with ScriptedModelServer(script) as server:
        spec = _spec(answer_task, out, server, [MODEL])
        executor = RayExecutor(out)
        executor.token = "another-batch"  # the node finds no token of ours: not shared storage
        log = out / "logs" / f"{run_id}.log"

        def in_long_command() -> bool:  # the log grows while the run runs, here on the driver
            return log.is_file() and "sleep 30" in log.read_text()

        runs = expand(spec, run_names(out))
        batch = asyncio.create_task(BatchRunner(spec, runs, executor, out).run())
        await _until(in_long_command, 90, "the run's long command in its live log")
        assert not (out / "runs" / run_id).exists()  # the folder is on the node until the end
        batch.cancel()  # Ctrl-C: the run records its stop on the node and comes back
        with pytest.raises(asyncio.CancelledError):
            await batch
        assert run_status(out, run_id).kind == "interrupted"

        server.set_fallback("worker", worker_writing("42"))
        progress = await BatchRunner(spec, expand(spec, run_names(out)), executor, out).run()
        assert progress.count("finished") == 1
    events = read_events(out / "runs" / run_id / "events.jsonl")
    assert any(isinstance(e, ev.RunResumed) for e in events)  # resumed from the folder sent
    text = log.read_text()
    assert "attempt 1: start" in text and "attempt 2: resume" in text
    assert text.count("[mlra batch] on ") == 2
    assert len(read_placements(out / "runs" / run_id)) == 2


@slow
async def test_a_run_on_a_node_without_the_batch_folder_shows_its_progress_while_it_runs(
    local_ray: Path, tmp_path: Path, answer_task: Path
) -> None:
    """Its folder comes back only at its end: its line said "running" and no more (no
    clock, no step) until then. Its event log reaches the driver as it grows, and the
    batch's line is derived from it as a local run's is (executors/live_log.py)."""
    out = tmp_path / "b"
    run_id = batch_run_id(out, MODEL)
    training = "echo 'step 100/600 loss 5.10'; sleep 12; echo 42 > answer.txt"
    script = {
        "supervisor:fallback": supervisor_fallback(),
        "worker:fallback": turn(
            "Training.", call("bash", command=training, timeout=60), call("report", summary="ok")
        ),
    }
    shown = io.StringIO()
    display = PlainProgress(shown, every_s=0)  # a line per running run at every change
    seen_while_running: list[str] = []

    def listener(p: Progress) -> None:
        display(p)
        if not (out / "runs" / run_id).exists():
            seen_while_running.append(shown.getvalue())

    with ScriptedModelServer(script) as server:
        spec = _spec(answer_task, out, server, [MODEL])
        executor = RayExecutor(out)
        executor.token = "another-batch"  # the node finds no token of ours: not shared storage
        runs = expand(spec, run_names(out))
        progress = await BatchRunner(spec, runs, executor, out, listener=listener).run()
    assert progress.count("finished") == 1
    lines = seen_while_running[-1].splitlines()
    assert any(
        re.search(rf"\] {run_id} running \d+s · step 100/600 loss 5\.1 · ETA", line)
        for line in lines
    ), "\n".join(lines)
    # The copy is gone with the run: its own folder, come back, is what counts now.
    assert not list((out / ".incoming").rglob("events.jsonl"))


# ---- without a Ray cluster ------------------------------------------------------------


def _node(
    cpus: float,
    *,
    gpus: float = 0,
    nodeb: float = 0,
    labels: dict[str, str] | None = None,
    accelerator: str | None = None,
) -> dict[str, Any]:
    """A live node as `ray.nodes()` describes it."""
    resources: dict[str, float] = {"CPU": cpus, "memory": 4 * 2**30, "node:192.0.2.2": 1.0}
    if gpus:
        resources["GPU"] = gpus
    if nodeb:
        resources["nodeB"] = nodeb
    if accelerator:
        resources[f"accelerator_type:{accelerator}"] = 1.0
    return {"NodeID": "a" * 56, "Alive": True, "Resources": resources, "Labels": labels or {}}


def test_a_request_no_node_can_hold_is_named_with_what_the_nodes_have() -> None:
    nodes = [_node(1), _node(1, nodeb=1, labels={"zone": "b"})]
    assert infeasible(request_of(1, 0, 0, {}, None), {}, nodes) is None
    assert infeasible(request_of(1, 0, 0, {"nodeB": 1}, None), {"zone": "b"}, nodes) is None
    assert (
        infeasible(request_of(2, 0, 0, {}, None), {}, nodes)
        == "needs 2 CPUs; the 2 nodes have 1, 1 CPUs"
    )
    assert (
        infeasible(request_of(1, 1, 0, {}, None), {}, nodes)
        == "needs 1 GPUs; the 2 nodes have 0, 0 GPUs"
    )
    assert infeasible(request_of(1, 0, 8, {}, None), {}, [_node(1)]) == (
        "needs 8 GB of memory; the cluster's one node has 4 GB of memory"
    )
    assert infeasible(request_of(1, 0, 0, {}, None), {"zone": "c"}, nodes) == (
        "needs node label zone=c; the 2 nodes have zone: -, b"
    )
    assert infeasible(request_of(1, 0, 0, {}, "H100"), {}, [_node(1, accelerator="A100")]) == (
        "needs accelerator type H100; the cluster's one node has A100"
    )
    # Each part fits some node, no node fits all of it.
    both = infeasible(request_of(1, 1, 0, {"nodeB": 1}, None), {}, [_node(1, gpus=1), nodes[1]])
    assert both is not None and both.endswith("no node has all of it")
    assert infeasible(request_of(1, 0, 0, {}, None), {}, []) == "the Ray cluster has no live node"


def test_placement_a_batch_asks_for_per_task_and_per_batch(
    tmp_path: Path, answer_task: Path
) -> None:
    spec = parse_spec(
        {
            "tasks": [str(answer_task)],
            "models": ["baseline"],
            "executor": "ray",
            "defaults": {"resources": {"pool": 1}, "labels": {"zone": "a"}},
            "overrides": {
                str(answer_task): {"resources": {"nodeB": 1}, "accelerator_type": "A100"}
            },
        }
    )
    [run] = expand(spec, run_names(tmp_path))
    assert run.resources.custom == {"pool": 1, "nodeB": 1}
    assert run.resources.labels == {"zone": "a"}
    assert run.resources.accelerator_type == "A100"
    # The local executor cannot place a run by labels or custom resources: it says so.
    reason = LocalExecutor().cannot_hold(run.resources)
    assert reason is not None and "--executor ray" in reason
    with pytest.raises(BatchError, match="resources"):
        parse_spec({"tasks": ["a"], "models": ["b"], "defaults": {"resources": {"x": "many"}}})


def test_folders_move_in_parts_and_tasks_are_cached_by_content(tmp_path: Path) -> None:
    task = tmp_path / "task"
    (task / "hidden").mkdir(parents=True)
    (task / "task.toml").write_text("name = 't'\n")
    (task / "hidden" / "big.bin").write_bytes(os.urandom(CHUNK + 12345))  # two parts
    copy = tmp_path / "copy"
    shutil.copytree(task, copy)
    os.utime(copy / "task.toml", (1, 1))
    digest = content_hash(task)
    assert content_hash(copy) == digest  # the same content, whatever the mtimes
    (copy / "task.toml").write_text("name = 'u'\n")
    assert content_hash(copy) != digest

    parts = list(stream_tar(task, "run"))
    assert len(parts) >= 2 and all(len(p) <= CHUNK for p in parts)
    threads = threading.active_count()
    abandoned = cast(Generator[bytes, None, None], stream_tar(task, "run", depth=1))
    next(abandoned)
    abandoned.close()  # the consumer stops taking parts: the producing thread ends too
    assert threading.active_count() == threads
    unpack(parts, tmp_path / "back")
    assert (tmp_path / "back/run/hidden/big.bin").read_bytes() == (
        task / "hidden/big.bin"
    ).read_bytes()

    fetched: list[int] = []

    def fetch() -> Iterator[bytes]:
        fetched.append(1)
        archive = tmp_path / "task.tar.gz"
        pack(task, archive)
        yield from file_chunks(archive)

    cache = tmp_path / "cache"
    first = cached(digest, fetch(), cache)
    again = cached(digest, fetch(), cache)  # a second run on the node: nothing fetched
    assert first == again == cache / digest and fetched == [1]
    assert (first / "hidden/big.bin").stat().st_size == CHUNK + 12345
    assert [p.name for p in cache.iterdir()] == [digest]  # no staging folders left


def test_an_address_where_no_ray_answers_is_one_line_and_exit_2(
    tmp_path: Path, answer_task: Path
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = ["batch", "--tasks", str(answer_task), "--models", "baseline", "--executor", "ray"]
    started = time.monotonic()
    proc = mlra_cli([*base, "--ray-address", f"127.0.0.1:{port}"], cwd=tmp_path, timeout=60)
    assert time.monotonic() - started < 30
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"mlra: --ray-address 127.0.0.1:{port}: nothing answers there (Connection refused)"
    ]
    proc = mlra_cli([*base, "--ray-address", f"ray://127.0.0.1:{port}"], cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    if importlib.util.find_spec("grpc") is None:
        assert "needs Ray Client" in line and "mlra[batch]" in line
    else:
        assert "nothing answers there" in line


class _LosesFirstAttempts(LocalExecutor):
    """Runs locally, but the first `losses` attempts of each run end with their "node"
    before the run started, as a Ray node lost at that moment ends them."""

    def __init__(self, losses: int) -> None:
        super().__init__(Capacity(cpus=2, memory_gb=8, gpus=[]))
        self.losses = losses
        self.calls: dict[str, int] = {}

    async def run(self, job: Job, log_path: Path) -> int:
        self.calls[job.run_id] = self.calls.get(job.run_id, 0) + 1
        if self.calls[job.run_id] <= self.losses:
            job.placed("nodeB (node deadbeef)")
            where = Placement(node_id="deadbeef" * 7, host="nodeB", outcome="node lost")
            raise AttemptLost(where.model_copy(update={"detail": "NodeDiedError: gone"}))
        return await super().run(job, log_path)


async def test_attempts_lost_with_a_node_count_within_max_attempts(
    tmp_path: Path, answer_task: Path
) -> None:
    spec = BatchSpec(
        tasks=[str(answer_task)], models=["baseline"], isolation="none", max_attempts=2
    )
    out = tmp_path / "b"
    runner = BatchRunner(spec, expand(spec, run_names(out)), _LosesFirstAttempts(1), out)
    progress = await runner.run()
    assert progress.count("finished") == 1 and progress.lost == 1
    run_id = batch_run_id(out, "baseline")
    [lost] = read_placements(out / "retired" / f"{run_id}__a1")
    assert (lost.host, lost.outcome) == ("nodeB", "node lost")
    assert any(
        e.startswith(f"node lost {run_id}") and "1 attempt left" in e for e in progress.events
    )

    out2 = tmp_path / "b2"
    runs = expand(spec, run_names(out2))
    progress = await BatchRunner(spec, runs, _LosesFirstAttempts(2), out2).run()
    run_id = batch_run_id(out2, "baseline")
    status = progress.statuses[run_id]
    assert (status.kind, status.reason, status.attempts) == ("failed", "node lost", 2)
    write_report(out2, plots=False)
    report = (out2 / "report.md").read_text()
    assert f"- {run_id} (attempt 2): node lost: NodeDiedError: gone" in report
    assert "| nodeB (node deadbeef) | 2 | 0 | 2 |" in report


def test_a_batch_whose_runs_never_had_a_folder_is_reported(tmp_path: Path) -> None:
    out = tmp_path / "b"
    (out / "logs").mkdir(parents=True)
    (out / "batch.json").write_text("{}")
    write_card(
        out,
        RunCard(
            run_id="t__m__s1",
            task="t",
            model="m",
            seed=1,
            not_started="resources",
            detail="needs 2 CPUs; the 2 nodes have 1, 1 CPUs",
        ),
    )
    proc = mlra_cli(["report", str(out), "--no-plots"], cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "- t__m__s1 (attempt 1): resources: needs 2 CPUs; the 2 nodes have 1, 1 CPUs" in (
        proc.stdout
    )
    rows = json.loads((out / "report.json").read_text())["runs"]
    assert [(r["run_id"], r["status"], r["reason"]) for r in rows] == [
        ("t__m__s1", "not started", "resources")
    ]
