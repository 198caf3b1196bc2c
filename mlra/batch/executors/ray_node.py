"""What a batch run does on the Ray node that holds it: a generator task.

It tells the driver where it runs first, then streams the run's output while the
run runs (the driver's `logs/<run>.log` grows live), then its exit status, then,
when the node does not share the batch folder, the run folder in parts. A task
folder only the driver has arrives once per node (by content hash, see
`shipping`), into a cache outside any workspace: its hidden files reach the
grader the way they do locally, and never the agent's workspace.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlra.batch.executors.arrivals import batch_folder
from mlra.batch.executors.live_log import POLL_S, LogTail
from mlra.batch.executors.local import die_with_parent
from mlra.batch.executors.shipping import cached, stream_tar, unpack
from mlra.tools.sandbox.trees import remove_tree

SCRATCH_PREFIX = "mlra-batch-"
"""A node's scratch folder is named `mlra-batch-<worker pid>-...`, so a later task on the
node can tell a lost run's folder from a live one's."""
LOG_FLUSH_S = 0.3
"""Output is sent on at least this often while a run prints."""
STOP_GRACE_S = 30.0
MAX_BACKLOG = 4
"""Messages (a folder part is 8 MiB) a run under Ray Client lets wait for the driver."""
FOLDER_WAIT_S = 600.0
"""How long a resumed run waits for the driver to pack and send its folder."""

Message = tuple[str, Any]
"""("node", {...}), ("need_run_folder", None) for a resume on a node without the batch
folder, ("log", bytes), ("events", live_log.Piece) where the node lacks the batch folder,
("exit", int), ("folder", bytes) parts, ("end", None)."""


@dataclass
class Shipment:
    """A folder in the object store: its hash and its parts (refs, fetched on demand)."""

    digest: str
    parts: list[Any] = field(default_factory=list)

    def fetch(self) -> Iterator[bytes]:
        for ref in self.parts:
            yield _wait(ref)


def _wait(ref: Any) -> Any:
    """An object's value, waited for through a future: a task blocked in ray.get lends its
    CPU back to Ray, which then starts a queued run beside this one on the same CPU."""
    return ref.future().result()


@dataclass
class NodeJob:
    run_id: str
    args: list[str]
    env: dict[str, str]
    out: str
    token: str
    has_gpus: bool
    task_path: str | None = None
    """The user's task folder as the driver names it (replaced by the node's copy)."""
    task: Shipment | None = None
    coordinator: Any = None
    """The batch's Coordinator actor."""
    generation: int = 0


class Coordinator:
    """The batch's actor the runs ask things of while they run (one per batch, no CPU).

    Whether the batch is stopping (Ctrl-C): runs ask rather than being cancelled by
    Ray, since a cancelled generator's further messages are dropped, and a stopped
    run's output and folder must still reach the driver. And a resumed run's folder,
    sent only when the node that holds the run turns out not to share the batch
    folder (on shared storage a large run folder is never packed)."""

    def __init__(self) -> None:
        self.stopped = -1
        """Runs started in this generation or before are to stop (an executor used again
        after a stop starts a new generation)."""
        self.folders: dict[str, list[Any]] = {}
        self.messages: dict[str, list[Message]] = {}

    def set(self, generation: int) -> None:
        self.stopped = max(self.stopped, generation)

    def is_set(self, generation: int) -> bool:
        return generation <= self.stopped

    def push(self, key: str, message: Message) -> int:
        """A message of a run under Ray Client (no generator tasks there); returns the backlog."""
        queue = self.messages.setdefault(key, [])
        queue.append(message)
        return len(queue)

    def backlog(self, key: str) -> int:
        return len(self.messages.get(key, []))

    def pull(self, key: str) -> list[Message]:
        return self.messages.pop(key, [])

    def offer(self, run_id: str, parts: list[Any]) -> None:
        self.folders[run_id] = parts

    def take(self, run_id: str) -> list[Any] | None:
        return self.folders.pop(run_id, None)


def run_pushing(job: NodeJob, key: str) -> None:
    """`run_on_node` where the driver reaches the cluster through Ray Client, which runs no
    generator tasks: each message goes through the coordinator, a few at most in flight."""
    for message in run_on_node(job):
        backlog: int = _wait(job.coordinator.push.remote(key, message))
        while backlog > MAX_BACKLOG:
            time.sleep(0.1)
            backlog = int(_wait(job.coordinator.backlog.remote(key)))


def where() -> dict[str, str]:
    import ray

    context = ray.get_runtime_context()
    try:
        ip = ray.util.get_node_ip_address()
    except Exception:  # an address is a nicety; the node id is what identifies the node
        ip = ""
    return {"node_id": context.get_node_id(), "host": socket.gethostname(), "ip": ip}


def run_on_node(job: NodeJob) -> Iterator[Message]:
    """The body of the Ray task (a generator: each yield reaches the driver at once)."""
    yield "node", where()
    out_dir = Path(job.out)
    try:  # the batch's own folder in `out`, named by its token: the driver's disk is here
        shared = batch_folder(out_dir, job.token).is_dir()
    except OSError:
        shared = False
    args = list(job.args)
    if job.task is not None and job.task_path:
        copy = str(cached(job.task.digest, job.task.fetch()))
        args = [copy if a == job.task_path else a for a in args]
    scratch = None
    renames: list[tuple[bytes, bytes]] = []
    if not shared:
        clear_stale_scratch()
        scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
        # The log names the driver's folders (where the run comes back), not the node's.
        mine, theirs = str(scratch / "runs"), str(out_dir / "runs")
        renames = [(mine.encode(), theirs.encode())]
        try:
            renames.append((os.path.relpath(mine).encode(), theirs.encode()))
        except ValueError:
            pass
    try:
        if scratch is not None:
            runs = str(out_dir / "runs")
            args = [
                a.replace(runs, str(scratch / "runs"), 1) if a.startswith(runs) else a for a in args
            ]
            if args[0] == "resume":
                yield "need_run_folder", None
                parts = _wait_for_folder(job)
                unpack(Shipment("", parts).fetch(), scratch / "runs" / job.run_id)
        import ray

        gpu_ids = [str(i) for i in ray.get_gpu_ids()]
        if gpu_ids or job.has_gpus:  # a resumed run too: the GPUs Ray gives it now
            args = [*args, "--gpus", ",".join(gpu_ids) or "none"]
        # Without the batch folder, the run's event logs go to the driver as they grow, so
        # the batch's progress says how it goes before its folder comes back.
        tail = LogTail(scratch / "runs" / job.run_id) if scratch is not None else None
        code = yield from _run(args, job.env, job.coordinator, job.generation, renames, tail)
        yield "exit", code
        if scratch is not None:
            run_dir = scratch / "runs" / job.run_id
            # A run that died outright left its volume mounted: its files go back, not its image.
            _settle_volumes(scratch)
            if run_dir.is_dir():
                for part in stream_tar(run_dir, job.run_id):
                    yield "folder", part
        yield "end", None
    finally:
        if scratch is not None:
            remove_scratch(scratch)


def renamed(data: bytes, renames: Sequence[tuple[bytes, bytes]]) -> bytes:
    for old, new in renames:
        data = data.replace(old, new)
    return data


def clear_stale_scratch(root: Path | None = None) -> list[Path]:
    """Removes the scratch folders of runs whose worker is gone (a run lost with its node
    leaves one: its worker died before its `finally`); returns what it removed."""
    gone: list[Path] = []
    for path in Path(root or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        pid = path.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        if remove_scratch(path):
            gone.append(path)
    return gone


def remove_scratch(scratch: Path) -> bool:
    """Remove a run's scratch folder once no workspace volume is mounted in it; whether it
    was removed. A run killed with its worker (or past its stop's grace) leaves its volume
    mounted at its workspace: removed under it, the files on it went, the image was
    unlinked while its loop device kept it open, and the mount and the quota's whole
    reserved space stayed taken on the node until a reboot. Such a volume is settled first
    (tools/sandbox/volume.py, as any sandbox's start settles a killed run's); one still in
    use (its run's sandbox not yet gone, a container) keeps the folder for a later task."""
    if not _settle_volumes(scratch):
        return False
    remove_tree(scratch, ignore_errors=True)
    return True


def _settle_volumes(scratch: Path) -> bool:
    """Settle the volumes of gone runs in `scratch`; whether none is left mounted there."""
    from mlra.tools.sandbox.volume import unavailable
    from mlra.tools.sandbox.volume_settle import VolumeFailed, settle_stale
    from mlra.tools.sandbox.volume_users import loop_mounts

    if unavailable() is not None:
        return True  # no volume can have been made here
    root = scratch.resolve()
    try:
        for run_dir in sorted((root / "runs").iterdir()):  # where a run's image lies
            if run_dir.is_dir() and not run_dir.is_symlink():
                settle_stale(run_dir)
    except (OSError, VolumeFailed):
        pass  # what is left mounted is looked at below
    return not any(
        point == root or root in point.parents
        for points in loop_mounts().values()
        for point in points
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_for_folder(job: NodeJob) -> list[Any]:
    deadline = time.monotonic() + FOLDER_WAIT_S
    while time.monotonic() < deadline:
        parts = _wait(job.coordinator.take.remote(job.run_id))
        if parts is not None:
            return parts
        time.sleep(0.2)
    raise RuntimeError(f"the driver sent no folder for {job.run_id} in {FOLDER_WAIT_S:g} s")


def _run(
    args: list[str],
    env: dict[str, str],
    stop: Any,
    generation: int,
    renames: Sequence[tuple[bytes, bytes]] = (),
    tail: LogTail | None = None,
) -> Iterator[Message]:
    """Run `mlra` to its end, its output sent on as it comes; returns its exit status.

    When the batch stops, the run gets SIGTERM and records a stop, as a local
    batch's runs do, and stays resumable."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlra", *args],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=die_with_parent,  # a killed worker takes its run with it
    )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    pending = bytearray()
    last = polled = time.monotonic()
    asked: Any = None
    stopping = False
    try:
        while True:
            if stop is not None and not stopping:
                try:
                    # A future, not ray.wait/ray.get: a task blocked in those lends its
                    # CPU back to Ray, which starts a queued run beside this one on it.
                    if asked is None:
                        asked = stop.is_set.remote(generation).future()
                    elif asked.done():
                        stopping, asked = bool(asked.result()), None
                        if stopping:
                            proc.send_signal(signal.SIGTERM)
                except Exception:  # the flag's node gone: runs go on, Ray's cancel still stops them
                    stop = None
            ready, _, _ = select.select([fd], [], [], LOG_FLUSH_S)
            data = os.read(fd, 65536) if ready else b""
            pending += data
            now = time.monotonic()
            if pending and (not data or len(pending) >= 65536 or now - last >= LOG_FLUSH_S):
                yield "log", renamed(bytes(pending), renames)
                pending.clear()
                last = now
            if tail is not None and now - polled >= POLL_S:
                polled = now
                for piece in tail.poll():
                    yield "events", piece
            if ready and not data:  # end of output: the run has ended
                break
            if not ready and proc.poll() is not None:
                break  # ended, its output held open by a process it left behind
        code = proc.wait()
        for piece in tail.poll() if tail is not None else ():
            yield "events", piece
        return code
    except BaseException:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
        raise
    finally:
        proc.stdout.close()
