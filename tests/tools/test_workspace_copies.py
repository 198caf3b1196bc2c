"""A workspace copied whole inside a budget (tools/sandbox/workspace_copies.py): real
files, sparse and hard-linked, links that lead out, FIFOs and sockets; a copy that would
not fit, and one that fails midway, leave nothing behind."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mlra.tools.sandbox import trees
from mlra.tools.sandbox.workspace_copies import CopyRefused, copy_workspace, measure

MB = 1024 * 1024


def _on_disk(folder: Path) -> int:
    seen: set[tuple[int, int]] = set()
    total = 0
    for path in folder.rglob("*"):
        st = path.lstat()
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def _parent(root: Path) -> Path:
    """A workspace holding what the agent may leave: a 2 GB sparse file with data at its
    end, one 50 MB file with 20 hard links, links out, a FIFO, a socket, a read-only folder."""
    src = root / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    with open(src / "sparse.bin", "wb") as f:
        f.truncate(2 * 1024**3)
        f.seek(1024**3)
        f.write(b"data in the middle")
    (src / "big.bin").write_bytes(os.urandom(50 * MB))
    for i in range(1, 20):
        os.link(src / "big.bin", src / "sub" / f"link{i}.bin")
    os.symlink("/etc", src / "out")
    os.symlink("../../..", src / "sub" / "up")
    os.mkfifo(src / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "sub" / "sock"))
    sock.close()
    (src / "sub" / "deeper" / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(src / "sub" / "deeper" / "run.sh", 0o751)
    os.utime(src / "sub" / "deeper" / "run.sh", (1_000_000, 1_000_000))
    os.chmod(src / "sub" / "deeper", 0o555)
    return src


def test_sparse_files_and_hard_links_take_what_they_took_and_links_are_never_followed(
    tmp_path: Path,
) -> None:
    src = _parent(tmp_path)
    dest = tmp_path / "dest"
    found = copy_workspace(src, dest, quota_bytes=200 * MB)
    parent, child = _on_disk(src), _on_disk(dest)
    assert parent < 60 * MB and abs(child - parent) < MB, (parent, child)
    assert found.bytes <= parent + MB and found.apparent > 2 * 1024**3
    sparse = dest / "sparse.bin"
    assert sparse.stat().st_size == 2 * 1024**3 and sparse.stat().st_blocks * 512 < MB
    with open(sparse, "rb") as f:
        f.seek(1024**3)
        assert f.read(18) == b"data in the middle"
    big = (dest / "big.bin").stat()
    assert big.st_nlink == 20 and (dest / "sub" / "link19.bin").stat().st_ino == big.st_ino
    assert (dest / "big.bin").read_bytes() == (src / "big.bin").read_bytes()
    assert os.readlink(dest / "out") == "/etc" and os.readlink(dest / "sub" / "up") == "../../.."
    assert not (dest / "pipe").exists() and not (dest / "sub" / "sock").exists()
    assert found.skipped == [("FIFO", "pipe"), ("socket", "sub/sock")]
    assert found.skipped_text() == "pipe (FIFO), sub/sock (socket)"
    script = (dest / "sub" / "deeper" / "run.sh").stat()
    assert stat.S_IMODE(script.st_mode) == 0o751 and script.st_mtime == 1_000_000
    assert stat.S_IMODE((dest / "sub" / "deeper").stat().st_mode) == 0o555


def test_a_device_file_is_skipped_and_said(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a device file needs root")
    src = tmp_path / "src"
    src.mkdir()
    os.mknod(src / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    found = copy_workspace(src, tmp_path / "dest", quota_bytes=None)
    assert found.skipped == [("character device", "null")]
    assert list((tmp_path / "dest").iterdir()) == []


def test_a_copy_over_the_quota_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "weights.bin").write_bytes(os.urandom(3 * MB))
    dest = tmp_path / "dest"
    with pytest.raises(CopyRefused) as refused:
        copy_workspace(src, dest, quota_bytes=2 * MB, what="attempt a1's workspace")
    said = str(refused.value)
    assert said.startswith("attempt a1's workspace takes 3.0 MB on disk, more than")
    assert "disk quota of 2.0 MB" in said and str(tmp_path) not in said
    assert not dest.exists()


def test_a_workspace_gone_is_one_line_without_its_path(tmp_path: Path) -> None:
    with pytest.raises(CopyRefused) as refused:
        copy_workspace(tmp_path / "gone", tmp_path / "dest", quota_bytes=None, what="a1's copy")
    assert str(refused.value) == "a1's copy cannot be read (No such file or directory)"
    assert not (tmp_path / "dest").exists()


def test_a_copy_failing_midway_is_removed_and_says_where_without_a_host_path(
    tmp_path: Path,
) -> None:
    """A file-size limit (EFBIG) stands in for any error midway: ENOSPC, EDQUOT."""
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "small.txt").write_text("fits")
    (src / "z-large.bin").write_bytes(os.urandom(4 * MB))
    code = (
        "import resource, signal, sys\n"
        "from pathlib import Path\n"
        "from mlra.tools.sandbox.workspace_copies import CopyRefused, copy_workspace\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))\n"
        "try:\n"
        "    copy_workspace(Path(sys.argv[1]), Path(sys.argv[2]), quota_bytes=None)\n"
        "except CopyRefused as exc:\n"
        "    print(exc)\n"
    )
    for dest in (tmp_path / "new", tmp_path / "mounted"):
        if dest.name == "mounted":
            dest.mkdir()  # an empty folder there already (a mount point): emptied, kept
        done = subprocess.run(
            [sys.executable, "-c", code, str(src), str(dest)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
            check=True,
        )
        said = done.stdout.strip()
        assert said == (
            "copying the workspace failed at z-large.bin (File too large); "
            "the partial copy was removed"
        ), done.stderr
        assert (list(dest.iterdir()) == []) if dest.name == "mounted" else not dest.exists()


def test_a_tree_deeper_than_python_recurses_is_copied(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    fd = os.open(src, os.O_RDONLY)
    for _ in range(1100):
        os.mkdir("d", dir_fd=fd)
        sub = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = sub
    os.close(fd)
    try:
        copy_workspace(src, tmp_path / "dest", quota_bytes=None)
        dest_fd = os.open(tmp_path / "dest", os.O_RDONLY)
        try:
            assert measure(dest_fd).inodes == 1100
        finally:
            os.close(dest_fd)
    finally:
        for tree in (src, tmp_path / "dest"):
            trees.remove_tree(tree)  # pytest's own clean-up recurses
