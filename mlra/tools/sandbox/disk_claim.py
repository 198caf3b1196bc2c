"""One sandbox at a time sets space aside on a disk.

A workspace volume's size is chosen from the space free when it is made (half of what
is beyond the reserve, for a default quota), and then `fallocate`d. Read-then-take is a
race between sandboxes made at once in other processes or threads: seven graders
started together each read the same free space, the first ones took half of it each,
and the next was refused, the reserve already taken (bench/gpu_check.py's evaluators,
which grade side by side, as a batch's runs ending together or attempts validating
together do). Holding the disk while choosing and reserving makes "each gets half of
what the last left" true however many start together.

The lock is an exclusive `flock` on the disk's own mount point: every process that sees
the disk sees that directory, whatever run folder it uses, and nothing is created on it.
Not covered: btrfs subvolumes and different bind mounts of one disk (each its own mount
point, one free space), where the race stays as it was; a file system that refuses a
directory's `flock` (NFS) is reserved on without the lock, as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from mlra.tools.sandbox.default_limits import MIB, disk_reserve_mb, free_mb

WAIT_S = 60.0
"""Longer than any volume's reservation takes (milliseconds; a slow disk, seconds)."""
POLL_S = 0.02


class SpaceRefused(Exception):
    """The space asked for would take the runs disk's reserve (one line)."""


class SpaceNotSetAside(Exception):
    """The space could not be set aside here: the disk stayed held, `fallocate` failed."""


class DiskBusy(SpaceNotSetAside):
    """Another sandbox held the disk past WAIT_S."""


def set_aside(folder: Path, image: Path, want_mb: int, *, shrink: bool) -> int:
    """Create `image` in `folder` with `want_mb` MB really reserved (`fallocate`), the
    disk held meanwhile; returns the MB reserved. `shrink` (a default quota): made half
    of what is left beyond the reserve where that is less, not refused."""
    with disk_claim(folder):
        free, reserve = free_mb(folder), disk_reserve_mb(folder)
        size = want_mb
        if shrink and (free - reserve) // 2 < size:
            size = max(1, (free - reserve) // 2)
        if free - size < reserve:
            raise SpaceRefused(
                f"the workspace's disk quota of {size:,} MB would leave "
                f"{max(0, free - size):,} MB free on the runs disk, under the "
                f"{reserve:,} MB it keeps for the logs, grading and other runs: ask for "
                "less (--disk) or free space"
            )
        fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.posix_fallocate(fd, 0, size * MIB)
        except OSError as exc:
            image.unlink()
            raise SpaceNotSetAside(f"the image cannot be reserved: {exc.strerror}") from None
        finally:
            os.close(fd)
    return size


def mount_point(path: Path) -> Path:
    """The root of the file system holding `path` (or its nearest existing parent)."""
    p = path.resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    dev = os.stat(p).st_dev
    while p != p.parent and os.stat(p.parent).st_dev == dev:
        p = p.parent
    return p


@contextlib.contextmanager
def disk_claim(path: Path, wait_s: float = WAIT_S) -> Iterator[Path]:
    """Hold the disk holding `path` while space is chosen and set aside on it; yields
    its mount point. DiskBusy where another holder does not let go within `wait_s`."""
    root = mount_point(path)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise DiskBusy(
                        f"another sandbox held {root} for more than {wait_s:.0f} s"
                    ) from None
                time.sleep(POLL_S)
            except OSError:
                break  # no lock on this file system (NFS: EBADF): reserve as before
        yield root
    finally:
        os.close(fd)
