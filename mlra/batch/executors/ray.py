"""Runs on a Ray cluster: each run a Ray generator task asking for its resources.

Placement is Ray's; everything else about a run is the batch's own, so that every
attempt is accounted for the same way as locally. Ray does not retry a task whose
node was lost (`max_retries=0`): the batch does, within `--max-attempts`, and
records where each attempt ran (`placement.json`, the log, `result.json`).

Nothing is assumed shared: a user's task folder is shipped to the node by content
hash, the run's output streams into `logs/<run>.log` as it comes, and when the
node does not see the batch folder (it finds no folder of this batch there) the
run works in a scratch folder whose contents come back in parts at its end; a
run resumed on such a node is sent its folder first.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from mlra.batch.executors import AttemptLost, Job, NotPlaced
from mlra.batch.executors.arrivals import Arrivals
from mlra.batch.executors.live_log import Piece, copy_folder, write_piece
from mlra.batch.executors.ray_connect import (
    RayLogs,
    alive_nodes,
    connect,
    infeasible,
    request_of,
)
from mlra.batch.executors.ray_node import (
    Coordinator,
    NodeJob,
    Shipment,
    run_on_node,
    run_pushing,
)
from mlra.batch.executors.ray_watch import HeadWatch
from mlra.batch.executors.shipping import content_hash, file_chunks, pack, unpack
from mlra.batch.spec import Resources
from mlra.batch.state import NODE_LOST, OUT_OF_MEMORY, RUNS, Placement, add_placement
from mlra.tools.sandbox.trees import remove_tree

POLL_S = 2.0
"""How often a queued run checks that some live node can still hold it."""
INFEASIBLE_POLLS = 2
"""Checks in a row that find no node for a queued run before it is refused."""
STOP_GRACE_S = 40.0
"""How long a stopped batch waits for a run to record its stop (and come back)."""


class RayExecutor:
    def __init__(self, out: Path, *, address: str | None = None) -> None:
        import ray

        self.out = out.resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self._ray = ray
        self._started = not ray.is_initialized()
        self._logs: RayLogs | None = None
        if self._started:
            self._logs = RayLogs(self.out / "ray.log")
            try:
                connect(address, self._logs.path)
            except BaseException:
                self._logs.close()
                raise
        self.token = secrets.token_hex(8)
        self.arrivals = Arrivals(self.out, self.token)
        """This batch's own folder for runs coming back (its name is the token a node looks for)."""
        self.incoming = self.arrivals.folder
        self.client = _through_client()
        """Ray Client (`ray://`): no generator tasks, messages go through the coordinator."""
        self._remote: Any = ray.remote(run_pushing if self.client else run_on_node)
        self.coordinator: Any = ray.remote(num_cpus=0, max_restarts=-1)(Coordinator).remote()
        self._generation = 0
        self.nodes = alive_nodes()
        self.has_gpus = any((n.get("Resources") or {}).get("GPU") for n in self.nodes)
        self._tasks: dict[str, Shipment] = {}
        self._shipping = asyncio.Lock()
        self._nodes_at = time.monotonic()
        self.on_head_lost: Callable[[str], None] | None = None
        """Told why, where the cluster's head stops answering: Ray ends the process ~60 s
        after, saying so in ray.log only (executors/ray_watch.py)."""
        address = None if self.client else ray.get_runtime_context().gcs_address
        self._watch = HeadWatch(address, self._head_lost) if address else None

    def _head_lost(self, why: str) -> None:
        if self.on_head_lost is not None:
            self.on_head_lost(why)

    async def live_nodes(self) -> list[dict[str, Any]]:
        """The live nodes, asked of Ray at most once a poll for all queued runs together."""
        if time.monotonic() - self._nodes_at >= POLL_S / 2:
            self._nodes_at = time.monotonic()
            self.nodes = await asyncio.to_thread(alive_nodes)
        return self.nodes

    def cannot_hold(self, resources: Resources) -> str | None:
        return infeasible(_request(resources), resources.labels, self.nodes)

    def _options(self, r: Resources) -> dict[str, Any]:
        options: dict[str, Any] = {
            "num_cpus": r.cpus,
            "num_gpus": r.gpus,
            "max_retries": 0,  # the batch retries, within --max-attempts
            "retry_exceptions": False,
        }
        if r.memory_gb:
            options["memory"] = int(r.memory_gb * 2**30)
        if r.custom:
            options["resources"] = dict(r.custom)
        if r.accelerator_type:
            options["accelerator_type"] = r.accelerator_type
        if r.labels:
            options["label_selector"] = dict(r.labels)
        return options

    def _put_file(self, path: Path) -> list[Any]:
        return [self._ray.put(part) for part in file_chunks(path)]

    def ship_folder(self, folder: Path, digest: str) -> Shipment:
        archive = self.incoming / f"out-{digest}-{secrets.token_hex(4)}.tar.gz"
        try:
            pack(folder, archive)
            return Shipment(digest, self._put_file(archive))
        finally:
            archive.unlink(missing_ok=True)

    async def _task_shipment(self, folder: str) -> Shipment:
        """A user's task folder in the object store, packed once a batch."""
        async with self._shipping:
            if folder not in self._tasks:
                path = Path(folder)
                digest = await asyncio.to_thread(content_hash, path)
                self._tasks[folder] = await asyncio.to_thread(self.ship_folder, path, digest)
            return self._tasks[folder]

    async def run(self, job: Job, log_path: Path) -> int:
        node_job = NodeJob(
            run_id=job.run_id,
            args=list(job.args),
            env=dict(job.env),
            out=str(self.out),
            token=self.token,
            has_gpus=self.has_gpus,
            coordinator=self.coordinator,
            generation=self._generation,
        )
        if job.task_folder and Path(job.task_folder).is_dir():
            node_job.task_path = job.task_folder
            node_job.task = await self._task_shipment(job.task_folder)
        request = _request(job.resources)
        attempt = _Attempt(self, job, log_path)
        options = self._options(job.resources)
        if self.client:
            gen = self._remote.options(**options).remote(node_job, attempt.key)
        else:
            gen = self._remote.options(**options).remote(node_job)
        try:
            await attempt.follow(gen, request)
        except asyncio.CancelledError:
            # The batch is stopping: the run records a stop (resumable) and comes back.
            self.coordinator.set.remote(node_job.generation)
            self._generation = max(self._generation, node_job.generation + 1)
            if attempt.placement is None:  # not started: nothing to stop or bring back
                self._ray.cancel(gen, force=True)
                attempt.close()
                raise
            try:
                await asyncio.wait_for(attempt.follow(gen, request, stopping=True), STOP_GRACE_S)
            except (TimeoutError, AttemptLost, NotPlaced, asyncio.CancelledError):
                self._ray.cancel(gen, force=True)
            attempt.close()
            if attempt.ended:
                await asyncio.to_thread(attempt.bring_back)
            raise
        finally:
            attempt.close()
        await asyncio.to_thread(attempt.bring_back)
        if attempt.code is None:  # the stream ended without an exit status
            raise AttemptLost(attempt.lost("ended without an exit status"))
        return attempt.code

    def close(self) -> None:
        if self._watch is not None:  # a local head stopped below is not lost
            self._watch.stop()
        if self._started:  # only a Ray this batch connected to or started itself
            self._ray.shutdown()
        if self._logs is not None:
            self._logs.close()
            self._logs = None
        self.arrivals.close()  # this batch's arrivals only: another on `out` keeps its own


def _through_client() -> bool:
    try:
        from ray.util.client import ray as client

        return bool(client.is_connected())
    except ImportError:
        return False


def _request(r: Resources) -> dict[str, float]:
    return request_of(r.cpus, r.gpus, r.memory_gb, r.custom, r.accelerator_type)


class _Attempt:
    """One Ray task of a run, followed from the driver: its messages written where they go."""

    def __init__(self, executor: RayExecutor, job: Job, log_path: Path) -> None:
        self.executor = executor
        self.job = job
        self.log_path = log_path
        self.placement: Placement | None = None
        self.code: int | None = None
        self.ended = False
        self._log: BinaryIO | None = None
        self._archive: Path | None = None
        self._archive_file: BinaryIO | None = None
        self._pending: asyncio.Future[tuple[str, Any] | None] | None = None
        self.key = f"{job.run_id}-{secrets.token_hex(4)}"
        """This attempt's messages at the coordinator (Ray Client only)."""
        self._pulled: list[tuple[str, Any]] = []
        self._copy: Path | None = None
        """Where the run's event logs are copied as they arrive (a node without the batch folder)."""
        self._copy_told = False

    def _write_log(self, data: bytes) -> None:
        if self._log is None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "ab")  # open while the run prints
        self._log.write(data)
        self._log.flush()

    def lost(self, why: str, outcome: str = NODE_LOST) -> Placement:
        base = self.placement or Placement(node_id="", host="(not placed)")
        return base.model_copy(update={"outcome": outcome, "detail": why})

    async def _fetch(self, gen: Any) -> tuple[str, Any] | None:
        if self.executor.client:
            return await self._pull(gen)
        try:
            ref = await gen.__anext__()
        except StopAsyncIteration:
            return None
        return await ref

    async def _pull(self, task: Any) -> tuple[str, Any] | None:
        """The next message of a run under Ray Client; None once its task has ended and
        every message it pushed has been taken."""
        import ray

        coordinator = self.executor.coordinator
        while not self._pulled:
            ended = bool(ray.wait([task], timeout=0)[0])
            self._pulled = list(await coordinator.pull.remote(self.key))
            if self._pulled:
                break
            if ended:
                await task  # raises what ended the task (its node lost, ...)
                return None
            await asyncio.sleep(0.2)
        return self._pulled.pop(0)

    async def _watch_feasible(self, request: dict[str, float]) -> str:
        """Returns why no live node can hold the run, once that has stayed so."""
        misses = 0
        while True:
            await asyncio.sleep(POLL_S)
            nodes = await self.executor.live_nodes()
            reason = infeasible(request, self.job.resources.labels, nodes)
            misses = misses + 1 if reason else 0
            if reason and misses >= INFEASIBLE_POLLS:
                return reason

    async def follow(self, gen: Any, request: dict[str, float], *, stopping: bool = False) -> None:
        """Take the task's messages until its stream ends (a stopped batch calls it again:
        the message being fetched when it was interrupted is kept, not lost)."""
        import ray
        from ray.exceptions import RayError, TaskCancelledError

        watch = None
        if not stopping and self.placement is None:
            watch = asyncio.ensure_future(self._watch_feasible(request))
        try:
            while True:
                if self._pending is None:
                    self._pending = asyncio.ensure_future(self._fetch(gen))
                waiting: set[asyncio.Future[Any]] = {self._pending}
                if watch is not None:
                    waiting.add(watch)
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if watch is not None and watch in done:
                    ray.cancel(gen, force=True)
                    raise NotPlaced(watch.result())
                if self._pending not in done:
                    continue
                fetched, self._pending = self._pending, None
                message = fetched.result()
                if message is None:
                    return
                kind, value = message
                if kind == "node":
                    self._placed(value)
                    if watch is not None:
                        watch.cancel()
                        watch = None
                elif kind == "need_run_folder":
                    await self._send_run_folder()
                elif kind == "log":
                    self._write_log(value)
                elif kind == "events":
                    self._copy_events(value)
                elif kind == "exit":
                    self.code = int(value)
                elif kind == "folder":
                    self._receive(value)
                elif kind == "end":
                    self.ended = True
        except TaskCancelledError:
            if stopping:
                return
            raise AttemptLost(self.lost("the Ray task was cancelled")) from None
        except RayError as exc:
            outcome, why = lost_outcome(exc)
            self._write_log(f"\n[mlra batch] attempt lost ({outcome}): {why}\n".encode())
            raise AttemptLost(self.lost(why, outcome)) from None
        finally:
            if watch is not None:
                watch.cancel()

    async def _send_run_folder(self) -> None:
        """A resume landed on a node without the batch folder: it gets the run's folder."""
        executor, run_id = self.executor, self.job.run_id
        run_dir = executor.out / RUNS / run_id
        parts: list[Any] = []
        if run_dir.is_dir():
            shipment = await asyncio.to_thread(executor.ship_folder, run_dir, f"run-{run_id}")
            parts = shipment.parts
        await executor.coordinator.offer.remote(run_id, parts)

    def _placed(self, where: dict[str, str]) -> None:
        self.placement = Placement(
            node_id=where.get("node_id", ""),
            host=where.get("host", ""),
            ip=where.get("ip", ""),
            started_at=time.time(),
        )
        when = time.strftime("%H:%M:%S", time.gmtime(self.placement.started_at))
        line = f"[mlra batch] on {self.placement.where} ({self.placement.ip}) from {when} UTC\n"
        self._write_log(line.encode())
        self.job.placed(self.placement.where)

    def _copy_events(self, piece: Piece) -> None:
        if self._copy is None:
            self._copy = copy_folder(self.executor.incoming, self.key)
            self._copy_told = False
        if write_piece(self._copy, piece) and not self._copy_told:
            self._copy_told = True
            self.job.copied(self._copy)

    def _receive(self, part: bytes) -> None:
        if self._archive_file is None:
            folder = self.executor.incoming
            self._archive = folder / f"in-{self.job.run_id}-{secrets.token_hex(4)}.tar.gz"
            self._archive_file = open(self._archive, "wb")  # closed in close()
        self._archive_file.write(part)

    def close(self) -> None:
        if self._pending is not None and not self._pending.done():
            self._pending.cancel()  # a task given up on (refused, force-cancelled)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._archive_file is not None:
            self._archive_file.close()
            self._archive_file = None
        if self._copy is not None:  # the run's own folder is what counts from here
            remove_tree(self._copy, ignore_errors=True)
            self._copy = None

    def bring_back(self) -> None:
        """Put the run folder that came back in place, and say where the attempt ran."""
        out = self.executor.out
        run_dir = out / RUNS / self.job.run_id
        if self._archive is not None:
            try:
                if self.ended:
                    staging = self.executor.incoming / f"{self.job.run_id}-{secrets.token_hex(4)}"
                    unpack(file_chunks(self._archive), staging)
                    if run_dir.exists():
                        remove_tree(run_dir)
                    run_dir.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(staging / self.job.run_id, run_dir)
                    remove_tree(staging, ignore_errors=True)
            finally:
                self._archive.unlink(missing_ok=True)
                self._archive = None
        if self.placement is None or not run_dir.is_dir():
            return
        add_placement(run_dir, self.placement)
        result = run_dir / "result.json"
        if result.is_file():
            try:
                data = json.loads(result.read_text(encoding="utf-8"))
                data["node"] = self.placement.model_dump(include={"node_id", "host", "ip"})
                tmp = result.with_suffix(".json.tmp")
                tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
                tmp.replace(result)
            except (OSError, ValueError):
                pass  # the result stays as the run wrote it


def lost_outcome(exc: BaseException) -> tuple[str, str]:
    """How an attempt Ray ended is labelled, and why, by the error Ray gave: every one was
    "node lost" (and counted "lost with a node"), a run Ray's memory monitor killed or a
    worker killed on a node still up included."""
    from ray.exceptions import OutOfMemoryError, RayTaskError, WorkerCrashedError

    if isinstance(exc, RayTaskError):  # the batch's own code failed on the node, not the node
        return "error on node", _one_line(exc.cause)
    if isinstance(exc, OutOfMemoryError):
        return (
            OUT_OF_MEMORY,
            f"the node ran out of memory and Ray killed the run ({_one_line(exc)})",
        )
    if isinstance(exc, WorkerCrashedError):
        return "worker died", f"the run's Ray worker died on a node still up ({_one_line(exc)})"
    return NODE_LOST, _one_line(exc)


def _one_line(exc: BaseException) -> str:
    """The error's kind and first sentence (Ray's go on for lines)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    first = lines[0].split(". ")[0].rstrip(".") if lines else ""
    return f"{type(exc).__name__}: {first}"[:200]
