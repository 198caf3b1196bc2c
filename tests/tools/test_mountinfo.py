"""Reading where things are mounted when a folder's name is hostile: the grader or an
agent names its folders, and a folder holding a mount can be renamed. Read as text, a
name that is not UTF-8 raised in every settling (each later sandbox start on the machine
failed), and one with U+0085 or U+00A0 split a line or moved a field."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlra.tasks.evaluators import cache_overlay
from mlra.tools.sandbox import run_uid, volume_settle, volume_users

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Path]:
    name = os.fsdecode(b"x\xff \xc2\x85 - ext4 loop9 rw\xc2\xa0y")
    point = tmp_path / name
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "mlra-test", point], check=True)
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", point], check=False)


def test_a_mount_at_a_folder_named_with_any_bytes_is_read_where_it_is(hostile: Path) -> None:
    assert str(hostile) in run_uid._mount_points()
    assert str(hostile) in cache_overlay.mounts()
    assert not any(hostile in points for points in volume_users.loop_mounts().values())
    assert not any(p.name.startswith("x") for ps in volume_users.loop_mounts().values() for p in ps)
    volume_settle.settle_stale(hostile.parent)  # no error: a sandbox start goes on
    (line,) = [f for f in volume_users.mountinfo() if volume_users.unescape(f[4]) == str(hostile)]
    assert volume_users.source_fields(line)[:2] == ["tmpfs", "mlra-test"]
