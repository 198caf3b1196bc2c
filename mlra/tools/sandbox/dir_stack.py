"""A chain of open folders below a root, with a bounded number of descriptors open.

Walking, copying and removing what the agent made must not recurse or build long paths
(tools/sandbox/trees.py), so each holds the folders from the root to where it is as
open descriptors, and a tree thousands of levels deep would hold thousands. `DirStack`
keeps at most `MAX_OPEN_DIRS` open: a folder closed to stay under the bound is opened
again by name from the nearest open one, without following links, and checked to be the
very folder it was (device and inode); one the agent swapped meanwhile is TreeChanged,
never another folder.
"""

from __future__ import annotations

import bisect
import errno
import os

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
"""O_NONBLOCK: a FIFO the agent left in place of a file must not hang mlra on open."""
MAX_OPEN_DIRS = 32
"""Folder descriptors one walk or cursor keeps open at most (the process's limit is
often 1,024)."""
CHECKPOINT = 64
"""Folders this many levels apart are kept open longest, so going back up a deep chain
reopens at most this many levels at a time (until the bound closes those too)."""


class TreeChanged(OSError):
    """A folder closed to stay under the descriptor bound is not there any more as it was."""


def file_key(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


class DirStack:
    """A chain of open folders below a root: the path from the root to one folder.

    At most `max_open` of them are open at once: the root, the deepest ones, and
    some spaced every `CHECKPOINT` levels on the way, from which a closed one is
    reopened by name (checked by device and inode) without going back to the root.
    """

    def __init__(self, root_fd: int, *, max_open: int = MAX_OPEN_DIRS) -> None:
        fd = os.dup(root_fd)
        self.parts: list[str] = []
        self._fds: list[int | None] = [fd]
        self._keys: list[tuple[int, int]] = [file_key(os.fstat(fd))]
        self._open: list[int] = [0]
        """The depths open now, in order."""
        self.max_open = max(4, max_open)

    @property
    def depth(self) -> int:
        return len(self.parts)

    def top(self) -> int:
        """The deepest folder's descriptor (reopened if it was closed); TreeChanged where
        a folder on the way is not the one that was there."""
        return self.fd_at(len(self._fds) - 1)

    def fd_at(self, depth: int) -> int:
        """The descriptor of the folder `depth` levels below the root (0: the root)."""
        fd = self._fds[depth]
        if fd is None:
            fd = self._reopen(depth)
        return fd

    def push(self, name: str, *, create: bool = False, mode: int = 0o777) -> int:
        """Open `name` below the deepest folder (made first with `create`); returns it."""
        parent = self.top()
        if create:
            try:
                os.mkdir(name, mode, dir_fd=parent)
            except FileExistsError:
                pass
        fd = os.open(name, DIR_FLAGS, dir_fd=parent)
        self.push_fd(name, fd)
        return fd

    def push_fd(self, name: str, fd: int) -> None:
        """Take `fd`, already opened as `name` below the deepest folder."""
        try:
            key = file_key(os.fstat(fd))
        except OSError:
            os.close(fd)
            raise
        self.parts.append(name)
        self._fds.append(fd)
        self._keys.append(key)
        self._open.append(len(self._fds) - 1)
        self._shed(keep=len(self._fds) - 1)

    def pop(self) -> None:
        if not self.parts:
            raise ValueError("the root cannot be left")
        depth = len(self._fds) - 1
        self.parts.pop()
        self._keys.pop()
        fd = self._fds.pop()
        if fd is not None:
            self._open.remove(depth)
            os.close(fd)

    def move_to(self, parts: tuple[str, ...] | list[str], *, create: bool = False) -> int:
        """Make the chain end at `parts` (sharing what it can with where it is)."""
        common = 0
        for mine, theirs in zip(self.parts, parts, strict=False):
            if mine != theirs:
                break
            common += 1
        while len(self.parts) > common:
            self.pop()
        for name in parts[common:]:
            self.push(name, create=create)
        return self.top()

    def _shed(self, keep: int) -> None:
        """Close folders while over the bound: the shallowest between checkpoints first,
        then the shallowest checkpoints; never the root, the deepest, or `keep`."""
        last = len(self._fds) - 1
        while len(self._open) > self.max_open:
            spare = [i for i in self._open if i not in (0, keep, last)]
            if not spare:
                return
            victim = next((i for i in spare if i % CHECKPOINT), spare[0])
            self._open.remove(victim)
            fd = self._fds[victim]
            self._fds[victim] = None
            assert fd is not None
            os.close(fd)

    def _reopen(self, depth: int) -> int:
        base = self._open[bisect.bisect_left(self._open, depth) - 1]
        fd = self._fds[base]
        assert fd is not None
        for i in range(base + 1, depth + 1):
            try:
                sub = os.open(self.parts[i - 1], DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise TreeChanged(exc.errno, "a folder changed while it was walked") from None
            if file_key(os.fstat(sub)) != self._keys[i]:
                os.close(sub)
                raise TreeChanged(errno.ESTALE, "a folder changed while it was walked")
            self._fds[i] = fd = sub
            bisect.insort(self._open, i)
            self._shed(keep=i)
        return fd

    def close(self) -> None:
        for fd in self._fds:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._fds = [None] * len(self._fds)
        self._open = []

    def __enter__(self) -> DirStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
