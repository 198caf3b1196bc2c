"""A Ray batch's own folder on the driver, for the run folders arriving from nodes.

`<out>/.incoming/<token>/` holds what one batch process has in flight: the parts of a
run folder coming back from a node without the batch folder, that folder unpacked
before it is put in place, and a run folder packed to be sent to such a node. Two
batches may share `<out>` (a second one started on the same folder, or another batch
of the same runs folder): each removes only its own folder, so one ending never
deletes the other's arriving runs. The folder's name is the batch's token, so a node
that sees it shares the batch folder with the driver.

A batch killed outright leaves its folder: `<out>/.incoming/<token>.lock` is flock'ed
by its batch for as long as that lives (as `.drivers/<run-id>` is), and the next batch
on the folder removes the folders whose lock no one holds. A file system without
`flock` keeps such leftovers rather than risk a live batch's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from pathlib import Path

from mlra.tools.sandbox.trees import remove_tree

INCOMING = ".incoming"
TOKEN = re.compile(r"^[0-9a-f]{16}$")
LOCK_SUFFIX = ".lock"


def batch_folder(out: Path, token: str) -> Path:
    """Where the batch of this token keeps what arrives (a node checks for it)."""
    return out / INCOMING / token


class Arrivals:
    """This batch's folder under `<out>/.incoming`, held by its lock until `close`."""

    def __init__(self, out: Path, token: str) -> None:
        root = out / INCOMING
        root.mkdir(parents=True, exist_ok=True)
        self._lock_path = root / f"{token}{LOCK_SUFFIX}"
        # The lock first, the folder after: a folder always has its lock, held once made.
        self._lock: int | None = os.open(
            self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        self._locked = _lock(self._lock)
        self.removed = clear_left(root) if self._locked else []
        """Folders of batches that are gone, removed as this one began."""
        self.folder = root / token
        self.folder.mkdir(exist_ok=True)

    def close(self) -> None:
        if self._lock is None:
            return
        remove_tree(self.folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            self._lock_path.unlink()
        os.close(self._lock)
        self._lock = None


def _lock(fd: int) -> bool:
    """Whether this process now holds the lock (False: another does, or no flock here)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def clear_left(root: Path) -> list[Path]:
    """Remove what batches that are gone left in `root` (`<out>/.incoming`): folders
    whose lock no living batch holds, and an older mlra's loose files; returns them."""
    removed: list[Path] = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return removed
    for name in names:
        path = root / name
        if name.endswith(LOCK_SUFFIX) and TOKEN.match(name.removesuffix(LOCK_SUFFIX)):
            continue  # a lock goes with its folder, below
        if not TOKEN.match(name):  # not a batch's folder: an older mlra's staging
            remove_tree(path, ignore_errors=True)
            removed.append(path)
            continue
        lock_path = root / f"{name}{LOCK_SUFFIX}"
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:  # its batch removed the lock last: the folder is a leftover
            remove_tree(path, ignore_errors=True)
            removed.append(path)
            continue
        except OSError:
            continue
        try:
            if _lock(fd):  # no living batch holds it
                remove_tree(path, ignore_errors=True)
                removed.append(path)
                with contextlib.suppress(OSError):
                    lock_path.unlink()
        finally:
            os.close(fd)
    return removed
