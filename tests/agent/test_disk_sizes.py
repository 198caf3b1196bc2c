"""The run's disk figure counts blocks in use (tools/sandbox/disk_use.py), as its disk
budget does: a sparse file by what it takes, a file hard-linked in the workspace and an
attempt's folder once. By sizes, a 1 GB sparse file read as 1 GB used."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from mlra.agent.loop.resources import disk_sizes
from mlra.agent.setup.run_budget import held_mb
from mlra.tools.sandbox import volume
from mlra.tools.sandbox.volume import WorkspaceVolume

MIB = 2**20


def test_a_sparse_file_counts_its_blocks_and_a_hard_link_counts_once(tmp_path: Path) -> None:
    workspace, attempts = tmp_path / "workspace", tmp_path / "attempts"
    workspace.mkdir()
    (attempts / "a1").mkdir(parents=True)
    with open(workspace / "sparse.bin", "wb") as f:
        f.truncate(1024 * MIB)
    (workspace / "data.bin").write_bytes(b"x" * (2 * MIB))
    os.link(workspace / "data.bin", attempts / "a1" / "data.bin")
    own, theirs = disk_sizes([workspace, attempts])
    assert 2 * MIB <= own < 3 * MIB
    assert theirs < MIB  # the link's blocks are the workspace's already
    assert held_mb([workspace, attempts]) == 3  # the same blocks, rounded up


WHY_NOT = volume.unavailable()


@pytest.mark.skipif(WHY_NOT is not None, reason=f"no workspace volume: {WHY_NOT}")
def test_the_figure_enters_a_workspace_volume_and_no_other_mount(tmp_path: Path) -> None:
    """An attempt's volume counts by the files on it (not its 32 MB image); a grader's
    cache overlay beside it (over a 4 MB "cache" here) is not entered, or the
    whole shared cache counted as the attempt's. An ended attempt's measure for the
    budget enters no mount and counts an image there by its blocks: it holds them."""
    attempt = tmp_path / "attempts" / "a1"
    workspace = (attempt / "workspace").resolve()
    workspace.mkdir(parents=True)
    made = WorkspaceVolume(workspace, 32, 1000)
    made.open()
    cache, empty, overlay = tmp_path / "cache", tmp_path / "empty", attempt / "evaluation"
    for folder in (cache, empty, overlay):
        folder.mkdir()
    (cache / "hub.bin").write_bytes(b"y" * (4 * MIB))
    lower = f"lowerdir={cache}:{empty}"  # read-only, as the grader's cache overlay shows it
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", lower, str(overlay)], check=True)
    try:
        (workspace / "model.bin").write_bytes(b"x" * (2 * MIB))
        (figure,) = disk_sizes([tmp_path / "attempts"])
        assert 2 * MIB <= figure < 3 * MIB
        assert 32 <= held_mb([attempt]) < 35
    finally:
        subprocess.run(["umount", str(overlay)], check=True)
        assert made.close() is None
