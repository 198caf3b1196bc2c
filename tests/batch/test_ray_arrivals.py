"""Two Ray batches on one batch folder: each keeps the runs arriving from its nodes in a
folder of its own (batch/executors/arrivals.py), and one ending never deletes the other's.

Before, every Ray batch used `<out>/.incoming` and removed it whole when it ended: a
second batch on the folder (the same command run again from another terminal, a cron
job) ending while the first was receiving a run folder from a node without the shared
disk deleted its parts, and the first batch died with FileNotFoundError on that run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mlra.batch.executors.arrivals import INCOMING, Arrivals, batch_folder
from tests.batch.naming import batch_run_id

ROOT = Path(__file__).resolve().parents[2]


def _killed_batch(out: Path, token: str) -> None:
    """A batch process that had a run arriving and was killed outright (kill -9)."""
    code = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from mlra.batch.executors.arrivals import Arrivals\n"
        "a = Arrivals(Path(sys.argv[1]), sys.argv[2])\n"
        "(a.folder / 'in-r1.tar.gz').write_bytes(b'part')\n"
        "os.kill(os.getpid(), 9)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, str(out), token], env=env, check=False)
    assert done.returncode == -signal.SIGKILL


def test_a_batch_ending_leaves_anothers_arriving_runs(tmp_path: Path) -> None:
    out = tmp_path / "b"
    first = Arrivals(out, "a" * 16)
    arriving = first.folder / "in-r1.tar.gz"
    arriving.write_bytes(b"the first part of a run folder")
    second = Arrivals(out, "b" * 16)  # the same folder, while the first still receives
    assert first.folder.is_dir() and second.folder.is_dir()
    second.close()
    assert arriving.read_bytes() == b"the first part of a run folder"
    assert not second.folder.exists()
    first.close()
    assert sorted(os.listdir(out / INCOMING)) == []


def test_what_a_killed_batch_left_is_removed_by_the_next_and_a_live_ones_kept(
    tmp_path: Path,
) -> None:
    out = tmp_path / "b"
    live = Arrivals(out, "c" * 16)
    (live.folder / "in-r2.tar.gz").write_bytes(b"live")
    _killed_batch(out, "d" * 16)
    left = batch_folder(out, "d" * 16)
    assert (left / "in-r1.tar.gz").is_file()  # a batch killed outright cleans nothing
    older = out / INCOMING / "r3-1a2b3c4d"  # an older mlra's staging, loose in the folder
    older.mkdir()
    nxt = Arrivals(out, "e" * 16)
    try:
        assert sorted(p.name for p in nxt.removed) == sorted([left.name, older.name])
        assert not left.exists() and not older.exists()
        assert (live.folder / "in-r2.tar.gz").read_bytes() == b"live"
        assert sorted(os.listdir(out / INCOMING)) == sorted(
            ["c" * 16, "c" * 16 + ".lock", "e" * 16, "e" * 16 + ".lock"]
        )
    finally:
        nxt.close()
        live.close()


@pytest.mark.slow
def test_a_run_arriving_at_one_ray_batch_survives_another_ending(
    local_ray: Path, tmp_path: Path
) -> None:
    """Two RayExecutors on one folder, a real local Ray (the one tests/batch shares,
    conftest.py): the first receives a run folder in parts from a node without the shared
    disk, the second ends meanwhile, and the first still puts the whole run folder in
    place."""
    from mlra.batch.executors import Job
    from mlra.batch.executors.ray import RayExecutor, _Attempt
    from mlra.batch.executors.shipping import stream_tar
    from mlra.batch.spec import Resources

    out = tmp_path / "b"
    run_id = batch_run_id(out, "baseline")
    on_node = tmp_path / "node-scratch" / run_id  # the run folder as the node has it
    (on_node / "workspace").mkdir(parents=True)
    (on_node / "workspace" / "answer.txt").write_text("42\n")
    (on_node / "big.bin").write_bytes(os.urandom(9 * 2**20))  # two parts
    first = RayExecutor(out)
    second = RayExecutor(out)
    try:
        job = Job(run_id, ["run"], Resources())
        attempt = _Attempt(first, job, out / "logs" / f"{run_id}.log")
        attempt._placed({"node_id": "n1", "host": "node-b", "ip": "192.0.2.2"})
        parts = list(stream_tar(on_node, run_id))
        assert len(parts) >= 2
        attempt._receive(parts[0])
        second.close()  # the other batch ends while the first receives
        for part in parts[1:]:
            attempt._receive(part)
        attempt.ended = True
        attempt.close()
        attempt.bring_back()
    finally:
        second.close()
        first.close()
    run_dir = out / "runs" / run_id
    assert (run_dir / "workspace" / "answer.txt").read_text() == "42\n"
    assert (run_dir / "big.bin").read_bytes() == (on_node / "big.bin").read_bytes()
    assert os.listdir(out / INCOMING) == []
