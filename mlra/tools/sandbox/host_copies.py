"""Whole files and folders copied between the host and a sandbox's workspace.

mlra brings things in for the agent (a clone, a paper's PDF) and takes things out (a
fork's or a test's copy), host-side, often as root, while processes the agent left may
still change the workspace. So both ways go by folder descriptors opened beneath the
workspace (Sandbox.open_beneath) and walk without recursion (tools/sandbox/trees.py):
files keep their holes, mode and times; coming in, links are copied as links and never
followed, and what mlra makes is handed to the sandbox (`Sandbox.created`: a container's
user owns it); going out, a link is followed only to a file inside the workspace. FIFOs,
sockets and devices are never copied.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

from mlra.tools.sandbox import beneath, sparse_files, trees
from mlra.tools.sandbox.base import Sandbox, SandboxError
from mlra.tools.sandbox.dir_stack import DirStack


async def copy_in(sandbox: Sandbox, host_src: Path, dest: str) -> None:
    """Copy a host file or folder into the workspace, without recursion: files with
    their holes, links as links (never followed), no FIFO or device."""
    if host_src.is_dir():
        fd, _ = sandbox.open_beneath(dest, os.O_RDONLY, make_parents=True, make_dir=True)
        try:
            _copy_tree_in(host_src, fd, sandbox.created)
        finally:
            os.close(fd)
        return
    fd, _ = sandbox.open_beneath(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, make_parents=True)
    _copy_file_in(host_src, fd)


def _copy_tree_in(src: Path, dir_fd: int, created: Callable[[int], None]) -> None:
    """Copy a host folder (trusted, but walked without recursion all the same) into
    an open workspace folder, creating what is missing and handing it to `created`."""
    src_fd = os.open(src, beneath.DIR_FLAGS)
    try:
        with DirStack(dir_fd) as dest:
            for entry in trees.walk(src_fd):
                dest.move_to(entry.parent)
                if entry.is_dir:
                    try:
                        os.mkdir(entry.name, 0o777, dir_fd=dest.top())
                    except FileExistsError:
                        continue
                    made = os.open(entry.name, beneath.DIR_FLAGS, dir_fd=dest.top())
                    created(made)
                    os.close(made)
                    continue
                if entry.is_link:  # as it is: nothing host-side follows a link out
                    with contextlib.suppress(OSError):
                        target = os.readlink(entry.name, dir_fd=entry.dir_fd)
                        os.symlink(target, entry.name, dir_fd=dest.top())
                    continue
                source = trees.open_in(entry.dir_fd, entry.name)
                if source is None:
                    continue  # a FIFO, socket or device: not copied
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | beneath.FILE_FLAGS
                try:
                    try:
                        fd = os.open(entry.name, flags | os.O_EXCL, 0o666, dir_fd=dest.top())
                        created(fd)
                    except FileExistsError:
                        fd = os.open(entry.name, flags & ~os.O_CREAT, dir_fd=dest.top())
                    _copy_fd(source, fd)
                finally:
                    os.close(source)
    finally:
        os.close(src_fd)


async def copy_out(sandbox: Sandbox, src: str, host_dest: Path) -> None:
    """Copy a workspace file or folder to the host. Links are followed only where
    they lead to a file inside the workspace; others are left out."""
    fd, rel = sandbox.open_beneath(src, os.O_RDONLY)
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
        host_dest.parent.mkdir(parents=True, exist_ok=True)
        _copy_file_out(fd, host_dest)
        return
    try:
        _copy_tree_out(sandbox, fd, "" if rel == "." else rel + "/", host_dest)
    finally:
        os.close(fd)


def _copy_tree_out(sandbox: Sandbox, dir_fd: int, prefix: str, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    dest_fd = os.open(dest, beneath.DIR_FLAGS)
    try:
        with DirStack(dest_fd) as out:
            for entry in trees.walk(dir_fd):
                try:
                    at = out.move_to(entry.parent)
                    if entry.is_dir:
                        os.mkdir(entry.name, 0o777, dir_fd=at)
                        continue
                    if entry.is_file:
                        fd = os.open(
                            entry.name, os.O_RDONLY | beneath.FILE_FLAGS, dir_fd=entry.dir_fd
                        )
                    elif entry.is_link:
                        fd, _ = sandbox.open_beneath(prefix + entry.rel, os.O_RDONLY)
                    else:
                        continue
                    _copy_out_at(fd, at, entry.name)
                except (OSError, SandboxError):
                    continue  # gone, changed under us, or a link that leads out
    finally:
        os.close(dest_fd)


def _copy_fd(source: int, target: int) -> None:
    """Copy an open file into another with its mode and times (as copy2), holes kept;
    closes `target`."""
    try:
        sparse_files.copy_sparse(source, target)
        st = os.fstat(source)
        os.fchmod(target, stat.S_IMODE(st.st_mode))
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(target)


def _copy_file_in(src: Path, fd: int) -> None:
    """Copy a host file into an open workspace file, with its mode and times (as copy2)."""
    source = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _copy_fd(source, fd)
    finally:
        os.close(source)


def _copy_out_at(fd: int, dir_fd: int, name: str) -> None:
    """Copy an open workspace file to `name` in a host folder; closes `fd`. Only a
    regular file is copied."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
        target = os.open(name, flags, 0o600, dir_fd=dir_fd)
        _copy_fd(fd, target)
    finally:
        os.close(fd)


def _copy_file_out(fd: int, dest: Path) -> None:
    """Copy an open workspace file to the host, with its mode and times; closes `fd`."""
    parent = os.open(dest.parent, beneath.DIR_FLAGS)
    try:
        _copy_out_at(fd, parent, dest.name)
    finally:
        os.close(parent)
