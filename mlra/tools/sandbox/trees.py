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
- A bounded number of open descriptors, however deep (tools/sandbox/dir_stack.py):
  only the folders nearest the walk's position are kept open (`MAX_OPEN_DIRS`); one
  closed to stay under the bound is opened again by name from the nearest open one,
  without following links, and checked to be the very folder it was (device and
  inode). A folder the agent swapped meanwhile ends that branch of the walk, never
  leads elsewhere.
- No link followed: entries are looked at with lstat and folders opened with
  O_NOFOLLOW; a link is reported as a link.
- Names are whatever bytes the file system holds, as Python gives them (str, an
  undecodable byte as a lone surrogate: os.fsencode restores the bytes exactly).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mlra.tools.sandbox.dir_stack import (
    DIR_FLAGS,
    FILE_FLAGS,
    MAX_OPEN_DIRS,
    DirStack,
    TreeChanged,
    file_key,
)

CHUNK = 1024 * 1024
MAX_UNREAD = 10_000


class TooLarge(Exception):
    """A file holds more than a bounded read takes."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size:,} bytes, more than the {limit:,} read at most")
        self.size = size
        self.limit = limit


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
            if file_key(os.fstat(sub)) != file_key(st):
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
