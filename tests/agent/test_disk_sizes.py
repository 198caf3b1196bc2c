"""The run's disk figure counts blocks in use (tools/sandbox/disk_use.py), as its disk
budget does: a sparse file by what it takes, a file hard-linked in the workspace and an
attempt's folder once. By sizes, a 1 GB sparse file read as 1 GB used."""

from __future__ import annotations

import os
from pathlib import Path

from mlra.agent.loop.resources import disk_sizes
from mlra.agent.setup.run_budget import held_mb

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
