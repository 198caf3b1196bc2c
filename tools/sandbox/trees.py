"""Whole trees the agent made, walked, copied and removed by folder descriptors.

mlra walks what the agent wrote (the workspace, a frozen submission, a run folder
to ship) host-side, often as root. Whatever shape the agent gave it must not
break the walk or lead it out:

- No recursion: a folder 3,000 levels deep is an ordinary input (Python's own
  `os.walk`, `os.fwalk`, `shutil.rmtree`, `copytree` and `tarfile.add` recurse,
  and fail past about a thousand levels).
- No path longer than a name: every step is relative to an open folder
  (`openat`, `fstatat`, `unlinkat`), so a path past PATH_MAX (4,096 bytes) is as
  good as a short one.
- A bounded number of open descriptors, however deep: only the folders nearest
  the walk's position are kept open (`MAX_OPEN_DIRS`); one closed to stay under
  the bound is opened again by name from the nearest open one, without following
  links, and checked to be the very folder it was (device and inode). A folder the
  agent swapped meanwhile ends that branch of the walk, never leads elsewhere.
- No link followed: entries are looked at with lstat and folders opened with
  O_NOFOLLOW; a link is reported as a link.
- Names are whatever bytes the file system holds, as Python gives them (str, an
  undecodable byte as a lone surrogate: os.fsencode restores the bytes exactly).
"""

from __future__ import annotations

import bisect
import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
"""O_NONBLOCK: a FIFO the agent left in place of a file must not hang mlra on open."""
MAX_OPEN_DIRS = 32
"""Folder descriptors one walk or cursor keeps open at most (the process's limit is
often 1,024)."""
CHECKPOINT = 64
"""Folders this many levels apart are kept open longest, so going back up a deep chain
reopens at most this many levels at a time (until the bound closes those too)."""
CHUNK = 1024 * 1024
MAX_UNREAD = 10_000


class TreeChanged(OSError):
    """A folder closed to stay under the descriptor bound is not there any more as it was."""


class TooLarge(Exception):
    """A file holds more than a bounded read takes."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size:,} bytes, more than the {limit:,} read at most")
        self.size = size
        self.limit = limit


def _key(st: os.stat_result) -> tuple[int, int]:
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
        self._keys: list[tuple[int, int]] = [_key(os.fstat(fd))]
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
            key = _key(os.fstat(fd))
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
            if _key(os.fstat(sub)) != self._keys[i]:
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


class Entry:
    """One entry of a walk, by lstat: a link is a link, never what it points to."""

    __slots__ = ("dir_fd", "leaving", "name", "parent", "rel", "st")

    def __init__(
        self,
        parent: tuple[str, ...],
        name: str,
        rel: str,
        st: os.stat_result,
        dir_fd: int,
        leaving: bool = False,
    ) -> None:
        self.parent = parent
        """The folders from the walk's root to the one holding it."""
        self.name = name
        self.rel = rel
        """Its path from the walk's root, '/'-separated."""
        self.st = st
        self.dir_fd = dir_fd
        """The folder holding it: open while the walk is at this entry, closed after."""
        self.leaving = leaving
        """True for a folder's second visit, once everything inside it was visited."""

    @property
    def parts(self) -> tuple[str, ...]:
        """From the walk's root, this entry's own name last."""
        return (*self.parent, self.name)

    @property
    def depth(self) -> int:
        return len(self.parent) + 1

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.st.st_mode)

    @property
    def is_link(self) -> bool:
        return stat.S_ISLNK(self.st.st_mode)


@dataclass
class WalkStats:
    """What a walk could not do, for the note its user writes."""

    entries: int = 0
    truncated: bool = False
    """It stopped at `max_entries`: what sorts after `last` was not looked at."""
    last_parent: tuple[str, ...] = ()
    last_name: str = ""
    too_deep: int = 0
    """Folders at `max_depth` not entered."""
    unreadable: int = 0
    """Folders that could not be opened or listed, or changed while walked."""
    unread: list[tuple[str, ...]] = field(default_factory=list)
    """Those folders' `parts` (the first MAX_UNREAD): what they hold is unknown."""

    def summary(self) -> list[str]:
        """What was not walked, in words (empty when everything was)."""
        out = []
        if self.truncated:
            out.append(f"stopped after {self.entries:,} entries (the walk's bound)")
        if self.too_deep:
            out.append(f"{self.too_deep:,} folder(s) deeper than the walk's bound not entered")
        if self.unreadable:
            out.append(f"{self.unreadable:,} folder(s) unreadable or changed while walked")
        return out

    @property
    def last(self) -> tuple[str, ...]:
        """The last entry visited (entries come in the order of their `parts`)."""
        return (*self.last_parent, self.last_name) if self.entries else ()

    partly: list[tuple[str, ...]] = field(default_factory=list)
    """Folders whose listing `max_entries` cut: some of their names were never read."""

    def not_read(self, parts: tuple[str, ...]) -> None:
        self.unreadable += 1
        if len(self.unread) < MAX_UNREAD:
            self.unread.append(parts)

    def partly_read(self, parts: tuple[str, ...]) -> None:
        self.partly.append(parts)  # one per walk: the budget is spent after it

    def maybe_unread(self, parts: tuple[str, ...]) -> bool:
        """Whether an entry at `parts` may exist unseen: in a folder not read (or read in
        part), or anywhere once more folders than MAX_UNREAD were not read."""
        if self.unreadable > len(self.unread):
            return True
        if self._prefixes is None:
            self._prefixes = set(self.unread) | set(self.partly)
        return any(parts[:k] in self._prefixes for k in range(0, len(parts)))

    _prefixes: set[tuple[str, ...]] | None = field(default=None, repr=False, compare=False)


@dataclass
class _Frame:
    entry: Entry | None
    parts: tuple[str, ...]
    prefix: str
    names: list[str]
    next: int = 0


def _names(fd: int, budget: int | None, dirs_first: bool = False) -> tuple[list[str], bool]:
    """A folder's names, sorted (folders first with `dirs_first`), at most `budget` of
    them; and whether there were more (those read are then any, not the first)."""
    found: list[tuple[bool, str]] = []
    cut = False
    with os.scandir(fd) as listing:
        for item in listing:
            if budget is not None and len(found) >= budget:
                cut = True
                break
            folder = False
            if dirs_first:
                try:
                    folder = item.is_dir(follow_symlinks=False)
                except OSError:
                    pass
            found.append((not folder, item.name))
    found.sort()
    return [name for _, name in found], cut


def walk(
    root_fd: int,
    *,
    enter: Callable[[Entry], bool] | None = None,
    max_depth: int | None = None,
    max_entries: int | None = None,
    leave: bool = False,
    stats: WalkStats | None = None,
    max_open: int = MAX_OPEN_DIRS,
    dirs_first: bool = False,
) -> Iterator[Entry]:
    """Every entry below `root_fd` (not itself), before what a folder holds, in the
    order of their `parts` (names sorted: an entry's order is a plain tuple compare;
    with `dirs_first` each folder's subfolders come before its other entries).

    A folder is entered unless `enter` says no or it lies `max_depth` levels down.
    With `leave`, a folder is visited again (`leaving`) after its contents, still with
    its parent open as `dir_fd` (to remove it). `max_entries` bounds the entries
    visited; `stats` says what was left out. Anything that cannot be read is left
    out and counted, never raised.
    """
    stats = stats if stats is not None else WalkStats()
    dirs = DirStack(root_fd, max_open=max_open)
    count = 0
    last: Entry | None = None
    lstat = os.stat
    is_dir = stat.S_ISDIR
    try:
        try:
            names, cut = _names(dirs.top(), max_entries, dirs_first)
        except OSError:
            stats.not_read(())
            return
        if cut:
            stats.partly_read(())
        frames = [_Frame(None, (), "", names)]
        frame = frames[-1]
        fd: int | None = dirs.top()
        limit = max_entries if max_entries is not None else -1
        while True:
            if frame.next >= len(frame.names):
                frames.pop()
                if frame.entry is None:
                    break
                dirs.pop()
                done = frame.entry
                frame = frames[-1]
                try:
                    fd = dirs.top()
                except TreeChanged:
                    fd = None
                    _abandon(frames, stats)
                    continue
                if leave:
                    yield Entry(done.parent, done.name, done.rel, done.st, fd, leaving=True)
                continue
            name = frame.names[frame.next]
            frame.next += 1
            if fd is None:  # the frame's folder could not be reopened
                continue
            try:
                st = lstat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue  # gone since it was listed
            if count == limit:
                stats.truncated = True
                return
            entry = Entry(frame.parts, name, frame.prefix + name, st, fd)
            count += 1
            last = entry
            yield entry
            if not is_dir(st.st_mode) or (enter is not None and not enter(entry)):
                continue
            parts = (*frame.parts, name)
            if max_depth is not None and len(parts) >= max_depth:
                stats.too_deep += 1
                continue
            try:
                sub = os.open(name, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                continue  # gone since: nothing to know of
            except OSError:
                stats.not_read(parts)  # turned into a link, or not ours to read
                continue
            if _key(os.fstat(sub)) != _key(st):
                os.close(sub)
                stats.not_read(parts)
                continue
            dirs.push_fd(name, sub)
            remaining = None if max_entries is None else max(0, max_entries - count)
            try:
                names, cut = _names(sub, remaining, dirs_first)
            except OSError:
                stats.not_read(parts)
                names, cut = [], False
            if cut:
                stats.partly_read(parts)
            frame = _Frame(entry, parts, entry.rel + "/", names)
            frames.append(frame)
            fd = sub
    finally:
        dirs.close()
        stats.entries += count
        if last is not None:
            stats.last_parent, stats.last_name = last.parent, last.name


def _abandon(frames: list[_Frame], stats: WalkStats) -> None:
    """The deepest folder cannot be reached again: nothing more is read from it."""
    frame = frames[-1]
    if frame.next < len(frame.names):
        stats.not_read(frame.parts)
    frame.next = len(frame.names)


# --- reading, copying and removing ---------------------------------------------------------


def open_in(dir_fd: int, name: str) -> int | None:
    """A regular file in an open folder, opened without following a link, or None."""
    try:
        fd = os.open(name, os.O_RDONLY | FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def read_bounded(fd: int, limit: int) -> bytes:
    """All of an open file, or TooLarge where it holds more than `limit` bytes (by its
    size first, and by what is read, since it may grow meanwhile)."""
    size = os.fstat(fd).st_size
    if size > limit:
        raise TooLarge(size, limit)
    parts: list[bytes] = []
    got = 0
    while got <= limit:
        chunk = os.read(fd, min(CHUNK, limit + 1 - got))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    if got > limit:
        raise TooLarge(max(size, got), limit)
    return b"".join(parts)


def read_head(fd: int, limit: int) -> bytes:
    """At most the first `limit` bytes of an open file."""
    parts: list[bytes] = []
    got = 0
    while got < limit:
        chunk = os.pread(fd, min(CHUNK, limit - got), got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """The (start, end) spans of `fd` that hold data, holes left out; the whole file
    where the file system cannot say."""
    spans: list[tuple[int, int]] = []
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nothing but a hole from here on
                break
            if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                return [*spans, (pos, size)]
            raise
        if start >= size:
            break
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        spans.append((start, end))
        pos = end
    return spans


_ZEROS = bytes(CHUNK)


def hash_into(fd: int, digest: Any) -> int:
    """Feed an open file's bytes to a hashlib object, holes as zeros from memory (the
    kernel makes them slowly: a sparse 2 GB file read at a third of a GB a second);
    returns the bytes fed. At most a chunk is held."""
    size = os.fstat(fd).st_size
    spans = data_extents(fd, size) if is_sparse(os.fstat(fd)) else [(0, size)]
    pos = 0
    for start, end in [*spans, (size, size)]:
        while pos < start:  # a hole
            n = min(CHUNK, start - pos)
            digest.update(_ZEROS[:n] if n < CHUNK else _ZEROS)
            pos += n
        while pos < end:
            chunk = os.pread(fd, min(CHUNK, end - pos), pos)
            if not chunk:
                return pos  # shrank while read
            digest.update(chunk)
            pos += len(chunk)
    return pos


def is_sparse(st: os.stat_result) -> bool:
    """Whether the file takes less disk than its size says (holes), by more than a block's slack."""
    return st.st_blocks * 512 + 64 * 1024 < st.st_size


def copy_sparse(src: int, dst: int) -> int:
    """Copy an open file's data into another, holes left as holes (a sparse file as large
    as the agent liked is never written out as that many zeros); returns its size."""
    size = os.fstat(src).st_size
    for start, end in data_extents(src, size):
        pos = start
        while pos < end:
            chunk = os.pread(src, min(CHUNK, end - pos), pos)
            if not chunk:
                break
            os.pwrite(dst, chunk, pos)
            pos += len(chunk)
    os.ftruncate(dst, size)
    return size


def remove_tree(path: Path | str, *, ignore_errors: bool = False) -> None:
    """Remove a file, link or folder however deep or long its paths (never following a
    link: a link inside is removed as itself)."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError:
        if ignore_errors:
            return
        raise
    try:
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path)
            return
        parent = os.open(path.parent, DIR_FLAGS)
        try:
            remove_below(parent, path.name, ignore_errors=ignore_errors)
        finally:
            os.close(parent)
    except OSError:
        if not ignore_errors:
            raise


def remove_below(parent_fd: int, name: str, *, ignore_errors: bool = False) -> None:
    """Remove the folder `name` in an open folder, and everything in it."""
    root = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    try:
        for entry in walk(root, leave=True):
            try:
                if entry.leaving:
                    os.rmdir(entry.name, dir_fd=entry.dir_fd)
                elif not entry.is_dir:
                    os.unlink(entry.name, dir_fd=entry.dir_fd)
            except FileNotFoundError:
                continue
            except OSError:
                if not ignore_errors:
                    raise
    finally:
        os.close(root)
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except OSError:
        if not ignore_errors:
            raise
