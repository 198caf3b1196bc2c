"""A workspace carried whole between a plain folder and its volume, both ways.

When a sandbox's workspace moves onto its volume (tools/sandbox/volume.py) and back
off it, what the agent sees must not change: files keep their holes (a sparse 40 GB
file stays a few blocks), mode, owner and times; hard links stay one file; links are
copied as links, never followed; folders keep their mode, owner and times. FIFOs,
sockets and device files are not copied (nothing in a workspace needs them, and the
volume is mounted nodev) and are counted. The walk is trees.walk's: no recursion,
no link followed, bounded descriptors, however the agent shaped the tree.

A lack of space (or an I/O error) stops the copy and is raised: the caller decides
what a workspace that does not fit means. Anything else that fails for one entry
(it vanished, it changed kind) skips that entry.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading

from mlra.tools.sandbox import sparse_files, trees
from mlra.tools.sandbox.dir_stack import DIR_FLAGS, FILE_FLAGS, DirStack

FATAL = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS)
"""Errors that end the copy: the destination cannot take the rest either."""


class CopyStopped(Exception):
    """`copy_tree` told to stop (the sandbox's start gave up): the copy is partial."""


def copy_tree(src_root: int, dst_root: int, stop: threading.Event | None = None) -> int:
    """Copy everything below the open folder `src_root` into the open folder `dst_root`
    (entries already there are replaced, folders merged); returns how many entries were
    left out (FIFOs, sockets, devices, entries that changed while copied). Raises
    CopyStopped at the next entry once `stop` is set."""
    skipped = 0
    first_of: dict[tuple[int, int], str] = {}
    """A hard-linked file's (device, inode) -> the path of its first copy."""
    with DirStack(dst_root) as out:
        for entry in trees.walk(src_root, leave=True):
            if stop is not None and stop.is_set():
                raise CopyStopped
            try:
                at = out.move_to(entry.parent)
                if entry.leaving:
                    _keep_meta(entry.name, at, entry.st)
                elif entry.is_dir:
                    _make_dir(entry.name, at)
                elif entry.is_link:
                    target = os.readlink(entry.name, dir_fd=entry.dir_fd)
                    _clear(entry.name, at)
                    os.symlink(target, entry.name, dir_fd=at)
                    _keep_meta(entry.name, at, entry.st)
                elif entry.is_file:
                    if not _copy_file(entry, at, dst_root, first_of):
                        skipped += 1
                else:
                    skipped += 1
            except OSError as exc:
                if exc.errno in FATAL:
                    raise
                skipped += 1
    return skipped


def _make_dir(name: str, at: int) -> None:
    try:
        os.mkdir(name, 0o700, dir_fd=at)
    except FileExistsError:
        st = os.stat(name, dir_fd=at, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            _clear(name, at)
            os.mkdir(name, 0o700, dir_fd=at)


def _clear(name: str, at: int) -> None:
    """Make way for an entry of another kind (a merge over an older copy)."""
    try:
        st = os.stat(name, dir_fd=at, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        trees.remove_below(at, name)
    else:
        os.unlink(name, dir_fd=at)


def _copy_file(
    entry: trees.Entry, at: int, dst_root: int, first_of: dict[tuple[int, int], str]
) -> bool:
    """Copy one regular file (or link it to its first copy); False where it was left out."""
    key = (entry.st.st_dev, entry.st.st_ino)
    _clear_unless_file(entry.name, at)
    if entry.st.st_nlink > 1 and key in first_of:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry.name, dir_fd=at)
        try:
            os.link(
                first_of[key], entry.name, src_dir_fd=dst_root, dst_dir_fd=at,
                follow_symlinks=False,
            )  # fmt: skip
            return True
        except OSError as exc:
            if exc.errno in FATAL:
                raise
            # A path past PATH_MAX or a first copy gone: copied as a file of its own.
    source = trees.open_in(entry.dir_fd, entry.name)
    if source is None:
        return False
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | FILE_FLAGS
        target = os.open(entry.name, flags, 0o600, dir_fd=at)
        try:
            sparse_files.copy_sparse(source, target)
            st = os.fstat(source)
            os.fchown(target, st.st_uid, st.st_gid)
            os.fchmod(target, stat.S_IMODE(st.st_mode))
            os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(target)
    finally:
        os.close(source)
    if entry.st.st_nlink > 1:
        first_of[key] = entry.rel
    return True


def _clear_unless_file(name: str, at: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        st = os.stat(name, dir_fd=at, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            _clear(name, at)  # a link to follow, a folder, or a link to another file


def _keep_meta(name: str, at: int, st: os.stat_result) -> None:
    """Owner, mode and times of a folder (once what it holds is in: adding entries
    changes its times) or a link (its own, never what it points to)."""
    os.chown(name, st.st_uid, st.st_gid, dir_fd=at, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        fd = os.open(name, DIR_FLAGS, dir_fd=at)
        try:
            os.fchmod(fd, stat.S_IMODE(st.st_mode))
        finally:
            os.close(fd)
    os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=at, follow_symlinks=False)


def copy_root_meta(src_root: int, dst_root: int) -> None:
    """The workspace folder's own owner, mode and times onto the other side's root."""
    st = os.fstat(src_root)
    os.fchown(dst_root, st.st_uid, st.st_gid)
    os.fchmod(dst_root, stat.S_IMODE(st.st_mode))
    os.utime(dst_root, ns=(st.st_atime_ns, st.st_mtime_ns))


def clear_folder(root: int, names: list[str] | None = None) -> None:
    """Remove everything below an open folder (the folder itself stays), or only the
    entries `names` in it (those gone already are skipped)."""
    for name in os.listdir(root) if names is None else names:
        try:
            st = os.stat(name, dir_fd=root, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            trees.remove_below(root, name)
        else:
            os.unlink(name, dir_fd=root)


__all__ = ["DIR_FLAGS", "clear_folder", "copy_root_meta", "copy_tree"]
