"""One workspace copied whole into another, inside a budget: an attempt started from
another attempt's workspace (`improve`, `debug`: docs/search.md).

The copy runs host-side as root, over whatever the agent left in the workspace, so
it is measured before it is made and bounded while it is made:

- measured first: the blocks the copy will take on disk (`st_blocks`, so a sparse
  file counts what it really holds, a hard link counts once) and the inodes; a copy
  over the child's disk quota, or over the free space (and inodes) of the disk it
  lands on less a reserve, is refused before anything is written, in one line;
- sparse files stay sparse (tools/sandbox/sparse_files.py), a file with several hard
  links is copied once and linked again in the copy, a link is copied as a link and
  never followed, FIFOs, sockets and device files are skipped and listed;
- modes and times are kept, as `shutil.copytree` keeps them (ownership is not: the
  copy is mlra's, as before);
- while copying, the blocks written are counted: a tree that grew since it was
  measured stops at the same bound;
- any error midway (ENOSPC, EDQUOT, anything) removes the partial copy.

The walk is tools/sandbox/trees.py's: no recursion, by folder descriptors, no link
followed out of the workspace. Messages name paths inside the workspace only, never
a host path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from mlra.tools.sandbox import sparse_files, trees
from mlra.tools.sandbox.default_limits import disk_reserve_mb, statvfs_of
from mlra.tools.sandbox.dir_stack import DIR_FLAGS, FILE_FLAGS, DirStack, file_key

MIB = 1024 * 1024
INODE_RESERVE_PERCENT = 5
"""The inodes a copy always leaves free; of the blocks it leaves the runs disk's reserve
(default_limits.disk_reserve_mb: a copy that filled the runs disk would stop every run
on it, the log's writes first)."""
GROWTH_SLACK = 4 * MIB
"""What the copy may take past its measure (a file system's own metadata) before it is
taken to have grown."""
SKIPPED_SHOWN = 20
"""Skipped entries named in the note; the rest are counted."""

_KINDS = {
    stat.S_IFIFO: "FIFO",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
}


class CopyRefused(Exception):
    """Why a workspace was not copied, in one line naming no host path; nothing of the
    copy is left."""


@dataclass
class Measured:
    """What a copy of a workspace will take, and what it will leave out."""

    bytes: int = 0
    """On disk: blocks, a hard-linked file once."""
    inodes: int = 0
    apparent: int = 0
    """The files' sizes as `ls` shows them (a sparse file's holes counted)."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(kind, path in the workspace) of each entry that is not copied."""
    unread: int = 0
    """Folders that could not be read (their contents are not copied)."""

    def skipped_text(self) -> str:
        """The skipped entries in words, '' when none was."""
        if not self.skipped and not self.unread:
            return ""
        named = [f"{_printable(rel)} ({kind})" for kind, rel in self.skipped[:SKIPPED_SHOWN]]
        more = len(self.skipped) - len(named)
        text = ", ".join(named) + (f" and {more:,} more" if more > 0 else "")
        if self.unread:
            text += ("; " if text else "") + f"{self.unread:,} unreadable folder(s)"
        return text


def _printable(rel: str) -> str:
    """A name as the agent may have spelled it (any bytes), safe in any text."""
    return rel.encode("utf-8", "backslashreplace").decode("utf-8")


def mb(nbytes: int) -> str:
    return f"{nbytes / MIB:,.1f} MB"


def measure(src_fd: int) -> Measured:
    """Walk an open workspace folder: what its copy will take and leave out."""
    found = Measured()
    seen: set[tuple[int, int]] = set()
    stats = trees.WalkStats()
    for entry in trees.walk(src_fd, stats=stats):
        st = entry.st
        kind = _KINDS.get(stat.S_IFMT(st.st_mode))
        if kind is not None:
            found.skipped.append((kind, entry.rel))
            continue
        if entry.is_file and st.st_nlink > 1:
            key = file_key(st)
            if key in seen:
                continue
            seen.add(key)
        found.bytes += st.st_blocks * 512
        found.inodes += 1
        if entry.is_file:
            found.apparent += st.st_size
    found.unread = stats.unreadable
    return found


@dataclass(frozen=True)
class Room:
    """What a copy may take on the disk it lands on."""

    quota: int | None
    """The child's own disk quota (bytes); None: none."""
    free: int
    reserve: int
    inodes_free: int | None
    """None: the file system does not count inodes."""

    @property
    def bytes(self) -> int:
        room = max(0, self.free - self.reserve)
        return room if self.quota is None else min(room, self.quota)


def room_at(dest: Path, quota_bytes: int | None) -> Room:
    """The room on the file system that will hold `dest` (or its nearest parent)."""
    vfs = statvfs_of(dest)
    if vfs is None:
        return Room(quota_bytes, 0, 0, None)
    reserve = disk_reserve_mb(dest) * MIB
    inodes = None
    if vfs.f_files:
        inodes = max(0, vfs.f_favail - vfs.f_files * INODE_RESERVE_PERCENT // 100)
    return Room(quota_bytes, vfs.f_bavail * vfs.f_frsize, reserve, inodes)


def check(found: Measured, room: Room, what: str) -> None:
    """Raise CopyRefused where the copy would not fit."""
    need = f"{what} takes {mb(found.bytes)} on disk"
    if found.apparent > found.bytes:
        need += f" ({mb(found.apparent)} by its files' sizes: holes are not copied)"
    if room.quota is not None and found.bytes > room.quota:
        raise CopyRefused(f"{need}, more than this attempt's disk quota of {mb(room.quota)}")
    if found.bytes > room.bytes:
        raise CopyRefused(
            f"{need}, more than the {mb(max(0, room.free - room.reserve))} the disk has free "
            f"beyond the {mb(room.reserve)} every copy leaves"
        )
    if room.inodes_free is not None and found.inodes > room.inodes_free:
        raise CopyRefused(
            f"{what} holds {found.inodes:,} files and folders, more than the "
            f"{room.inodes_free:,} the disk has free beyond its reserve"
        )


def copy_workspace(
    source: Path, dest: Path, *, quota_bytes: int | None, what: str = "the workspace"
) -> Measured:
    """Copy the folder `source` to `dest` (made here; or an empty folder there, filled),
    inside the budget; what was copied and skipped. Raises CopyRefused, having removed
    whatever of the copy was made, where it does not fit or fails midway."""
    try:
        src_fd = os.open(source, DIR_FLAGS)
    except OSError as exc:
        raise CopyRefused(f"{what} cannot be read ({exc.strerror})") from None
    try:
        found = measure(src_fd)
        room = room_at(dest, quota_bytes)
        check(found, room, what)
        made = not dest.exists()
        if made:
            os.mkdir(dest, 0o700)
        try:
            _copy(src_fd, dest, bound=room.bytes)
        except BaseException as exc:
            if made:
                trees.remove_tree(dest, ignore_errors=True)
            else:
                empty_folder(dest)
            if isinstance(exc, CopyRefused):
                raise
            if isinstance(exc, OSError):
                raise CopyRefused(_failed(exc, what)) from None
            raise
        return found
    finally:
        os.close(src_fd)


def empty_folder(dest: Path) -> None:
    """Remove what a folder holds, keeping the folder (a mount point: a file system of
    its own, sized for the workspace)."""
    with contextlib.suppress(OSError):
        fd = os.open(dest, DIR_FLAGS)
        try:
            for name in os.listdir(fd):
                with contextlib.suppress(OSError):
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        trees.remove_below(fd, name, ignore_errors=True)
                    else:
                        os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)


class _Failed(OSError):
    """An OSError where the copy was, by its path in the workspace."""

    def __init__(self, exc: OSError, rel: str) -> None:
        super().__init__(exc.errno, exc.strerror)
        self.rel = rel


def _failed(exc: OSError, what: str) -> str:
    where = f" at {_printable(exc.rel)}" if isinstance(exc, _Failed) and exc.rel else ""
    reason = exc.strerror or type(exc).__name__
    return f"copying {what} failed{where} ({reason}); the partial copy was removed"


def _copy(src_fd: int, dest: Path, *, bound: int) -> None:
    """Copy every entry; raise CopyRefused once more than `bound` bytes are on disk."""
    dest_fd = os.open(dest, DIR_FLAGS)
    written = 0
    first: dict[tuple[int, int], str] = {}
    """A hard-linked file's first copy, by its path from the copy's root."""
    try:
        with DirStack(dest_fd) as out:
            for entry in trees.walk(src_fd, leave=True):
                try:
                    at = out.move_to(entry.parent)
                    written += _copy_entry(entry, at, dest_fd, first)
                except OSError as exc:
                    raise _Failed(exc, entry.rel) from None
                if written > bound + GROWTH_SLACK:
                    raise CopyRefused(
                        f"the copy grew past {mb(bound)} on disk while it was made (the "
                        "workspace changed since it was measured); the partial copy was removed"
                    )
        root = os.fstat(src_fd)
        os.fchmod(dest_fd, stat.S_IMODE(root.st_mode))
        os.utime(dest_fd, ns=(root.st_atime_ns, root.st_mtime_ns))
    finally:
        os.close(dest_fd)


def _copy_entry(
    entry: trees.Entry, at: int, root_fd: int, first: dict[tuple[int, int], str]
) -> int:
    """Copy one entry into the open folder `at`; the bytes it took on disk."""
    st, name = entry.st, entry.name
    if entry.leaving:  # its contents are in: its own mode and times last
        os.chmod(name, stat.S_IMODE(st.st_mode), dir_fd=at)
        os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=at, follow_symlinks=False)
        return 0
    if entry.is_dir:
        os.mkdir(name, 0o700, dir_fd=at)
        return os.stat(name, dir_fd=at, follow_symlinks=False).st_blocks * 512
    if entry.is_link:
        os.symlink(os.readlink(name, dir_fd=entry.dir_fd), name, dir_fd=at)
        with contextlib.suppress(OSError):
            os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=at, follow_symlinks=False)
        return os.stat(name, dir_fd=at, follow_symlinks=False).st_blocks * 512
    if not entry.is_file:
        return 0  # a FIFO, socket or device: measured as skipped, never opened
    key = file_key(st)
    if st.st_nlink > 1 and key in first:
        with contextlib.suppress(OSError):  # a path past PATH_MAX: copied again instead
            os.link(first[key], name, src_dir_fd=root_fd, dst_dir_fd=at, follow_symlinks=False)
            return 0
    source = os.open(name, os.O_RDONLY | FILE_FLAGS, dir_fd=entry.dir_fd)
    try:
        if file_key(os.fstat(source)) != key:
            return 0  # replaced since it was listed: left out
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | FILE_FLAGS, 0o600, dir_fd=at)
        try:
            _copy_data(source, target, st)
            os.fchmod(target, stat.S_IMODE(st.st_mode))
            os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
            taken = os.fstat(target).st_blocks * 512
        finally:
            os.close(target)
    finally:
        os.close(source)
    if st.st_nlink > 1:
        first[key] = entry.rel
    return taken


def _copy_data(source: int, target: int, st: os.stat_result) -> None:
    """A file's bytes: a sparse one extent by extent, holes kept; any other in the kernel
    (`copy_file_range`: no bytes through mlra, a reflink where the file system has them)."""
    if sparse_files.is_sparse(st):
        sparse_files.copy_sparse(source, target)
        return
    pos = 0
    try:
        while n := os.copy_file_range(source, target, trees.CHUNK * 64, pos, pos):
            pos += n
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
        sparse_files.copy_sparse(source, target)  # a file system that cannot
