"""Runs on a Ray cluster: each run is a Ray task asking for its CPUs, GPUs and memory.

Queueing, placement and the retry of a task whose node was lost are Ray's; the
task itself runs the same `mlra run` command a local batch runs. When the batch
folder is on storage the node shares (it finds the batch's token there), the
run writes into it directly; otherwise it runs in a scratch folder on the node
and its run folder is sent back as an archive when it ends.
"""

from __future__ import annotations

import asyncio
import io
import os
import secrets
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlra.batch.executors import Job
from mlra.batch.executors.local import die_with_parent
from mlra.batch.spec import Resources
from mlra.batch.state import RUNS

TOKEN_FILE = ".mlra-batch-token"
LOST_NODE_RETRIES = 3


@dataclass
class RemoteResult:
    returncode: int
    output: bytes
    archive: bytes | None = None
    """The run folder as a tar.gz, when the node could not write into the batch folder."""


def run_on_node(
    args: list[str], env: dict[str, str], out: str, token: str, run_id: str, has_gpus: bool
) -> RemoteResult:
    """The body of a Ray task: runs on whichever node Ray placed it."""
    import subprocess
    import sys
    import tempfile

    from mlra.batch.state import retire, run_status

    out_dir = Path(out)
    token_file = out_dir / TOKEN_FILE
    shared = token_file.is_file() and token_file.read_text().strip() == token
    scratch = None
    if shared:
        # A retry after a lost node finds the dead attempt's folder: set it aside.
        status = run_status(out_dir, run_id)
        if "resume" not in args and status.kind in ("interrupted", "failed"):
            retire(out_dir, run_id)
    else:
        scratch = tempfile.mkdtemp(prefix="mlra-batch-")
        args = [a if a != str(out_dir / RUNS) else str(Path(scratch) / RUNS) for a in args]
    import ray

    gpu_ids = [str(i) for i in ray.get_gpu_ids()]
    if args[0] != "resume" and (gpu_ids or has_gpus):
        args = [*args, "--gpus", ",".join(gpu_ids) or "none"]
    proc = subprocess.run(
        [sys.executable, "-m", "mlra", *args],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        check=False,
        preexec_fn=die_with_parent,  # a cancelled task's worker is killed: the run goes with it
    )
    archive = None
    if scratch is not None:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            run_dir = Path(scratch) / RUNS / run_id
            if run_dir.exists():
                tar.add(run_dir, arcname=run_id)
        archive = buffer.getvalue()
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    return RemoteResult(proc.returncode, proc.stdout, archive)


class RayExecutor:
    def __init__(self, out: Path, *, address: str | None = None) -> None:
        import ray

        self._started = not ray.is_initialized()
        if self._started:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(include_dashboard=False, log_to_driver=False)
        self._ray = ray
        self.out = out.resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.token = secrets.token_hex(8)
        (self.out / TOKEN_FILE).write_text(self.token)
        self._remote = ray.remote(run_on_node)
        self.cluster = ray.cluster_resources()

    def cannot_hold(self, resources: Resources) -> str | None:
        # A cluster may grow (autoscaling), so only a GPU ask on a cluster without GPUs is refused.
        if resources.gpus and not self.cluster.get("GPU"):
            return f"needs {resources.gpus} GPU(s); the Ray cluster has none"
        return None

    async def run(self, job: Job, log_path: Path) -> int:
        r = job.resources
        options: dict[str, Any] = {
            "num_cpus": r.cpus,
            "num_gpus": r.gpus,
            "max_retries": LOST_NODE_RETRIES,
            "retry_exceptions": False,
        }
        if r.memory_gb:
            options["memory"] = int(r.memory_gb * 2**30)
        ref = self._remote.options(**options).remote(
            job.args, job.env, str(self.out), self.token, job.run_id, bool(self.cluster.get("GPU"))
        )
        try:
            result: RemoteResult = await ref
        except asyncio.CancelledError:
            self._ray.cancel(ref, force=True)
            raise
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            log.write(result.output)
        if result.archive:
            with tarfile.open(fileobj=io.BytesIO(result.archive), mode="r:gz") as tar:
                tar.extractall(self.out / RUNS, filter="data")
        return result.returncode

    def close(self) -> None:
        if self._started:  # only a Ray this batch connected to or started itself
            self._ray.shutdown()
