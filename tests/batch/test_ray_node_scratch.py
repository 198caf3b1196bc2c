"""What a Ray node does with the scratch folder of a run on a node without the batch
folder (fast, no Ray): a lost run's folder is cleared by the node's next batch task,
and the run's log names the driver's folders, not the node's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlra.batch.executors.ray_node import SCRATCH_PREFIX, clear_stale_scratch, renamed
from mlra.tools.sandbox import volume
from mlra.tools.sandbox.volume_users import loop_mounts
from tests.mount_namespaces import holder as holder_argv
from tests.mount_namespaces import loop_freed
from tests.tools.test_workspace_volume import _kill, _killed_owner, _owner_on_cue


def _dead_pid() -> int:
    """The pid of a process that has exited, as a lost node's workers have."""
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(ended.stdout)


def test_a_lost_runs_scratch_is_cleared_and_a_live_ones_kept(tmp_path: Path) -> None:
    dead = _dead_pid()  # its worker has exited, as a lost node's workers have
    lost = tmp_path / f"{SCRATCH_PREFIX}{dead}-x1y2"
    live = tmp_path / f"{SCRATCH_PREFIX}{os.getpid()}-a3b4"
    other = tmp_path / f"{SCRATCH_PREFIX}q7w8"  # not named by a worker: not ours to judge
    for folder in (lost, live, other):
        (folder / "runs" / "r1").mkdir(parents=True)
    assert clear_stale_scratch(tmp_path) == [lost]
    assert not lost.exists() and live.is_dir() and other.is_dir()


def test_a_runs_log_names_the_drivers_folders() -> None:
    scratch = f"/tmp/{SCRATCH_PREFIX}123-ab/runs"
    driver = "/home/u/b1/runs"
    renames = [
        (scratch.encode(), driver.encode()),
        (f"../{SCRATCH_PREFIX}123-ab/runs".encode(), driver.encode()),
    ]
    log = f"workspace {scratch}/r1/workspace\nrun finished · run dir ../{SCRATCH_PREFIX}123-ab/runs/r1\n"
    assert renamed(log.encode(), renames).decode() == (
        f"workspace {driver}/r1/workspace\nrun finished · run dir {driver}/r1\n"
    )


@pytest.mark.skipif(volume.unavailable() is not None, reason=f"{volume.unavailable()}")
def test_a_lost_runs_scratch_is_removed_only_after_its_volume_is_settled(
    tmp_path: Path,
) -> None:
    """A run killed with its worker leaves its workspace volume mounted in its scratch
    folder. Removing the folder under it emptied the volume, unlinked its image while the
    loop device held it, and left the mount and the quota's whole reserved space taken
    on the node for good."""
    dead = _dead_pid()
    scratch = tmp_path / f"{SCRATCH_PREFIX}{dead}-v1w2"
    workspace = (scratch / "runs" / "r1" / "workspace").resolve()
    workspace.mkdir(parents=True)
    owner = _owner_on_cue(workspace)
    [image] = [i for i, points in loop_mounts().items() if workspace in points]
    _kill(owner)  # another test's sandbox may settle it first: the scratch goes all the same
    try:
        assert clear_stale_scratch(tmp_path) == [scratch]
        assert not scratch.exists()
        assert image not in loop_mounts()  # unmounted, not hidden under a removed folder
        assert loop_freed(image)  # its loop device (and the image's space) freed
    finally:
        for point in loop_mounts().get(image, []):  # what the old removal left, for the next test
            subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.mark.skipif(volume.unavailable() is not None, reason=f"{volume.unavailable()}")
def test_a_lost_runs_scratch_whose_volume_is_still_in_use_is_kept_for_later(
    tmp_path: Path,
) -> None:
    """Its run's sandbox not yet gone (here another mount namespace holding the volume):
    the folder stays, volume and files with it, and a later task removes it."""
    scratch = tmp_path / f"{SCRATCH_PREFIX}{_dead_pid()}-u3v4"
    workspace = (scratch / "runs" / "r1" / "workspace").resolve()
    workspace.mkdir(parents=True)
    # The holder is in place before the owner dies: a sandbox another test sets up
    # meanwhile settles the volume of an owner gone and not held.
    owner = subprocess.Popen(
        **_killed_owner(workspace, on_cue=True), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert owner.stdout is not None and owner.stdout.readline() == "mounted\n"
    [image] = [i for i, points in loop_mounts().items() if workspace in points]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    holder = subprocess.Popen(holder_argv(workspace, elsewhere), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        owner.communicate("die\n")
        assert owner.returncode == -9
        assert clear_stale_scratch(tmp_path) == []
        assert (workspace / "written-on-the-volume.txt").read_text() == "kept"
        assert image.is_file()
    finally:
        holder.kill()
        holder.wait()
    try:
        assert clear_stale_scratch(tmp_path) == [scratch]  # no longer used: settled, removed
        assert not scratch.exists() and image not in loop_mounts()
    finally:
        for point in loop_mounts().get(image, []):
            subprocess.run(["umount", "-l", str(point)], check=False)
