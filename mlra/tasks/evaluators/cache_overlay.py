"""The grader's Hugging Face caches: each shared folder seen through an overlay whose
upper layer is the grader's own, in its scratch folder.

Online, huggingface_hub writes into the Hub's cache (the ref it resolved, a blob and its
snapshot link, a lock in `.locks`); offline or online, datasets writes into its cache as
it loads a prepared dataset (a lock beside it and at the cache's top, the arrow cache of
a `map` or `filter` in the dataset's folder, a download in `downloads/`). So the grader
cannot be shown them as they are. Mirroring them (a folder for each folder, a link for
each file) gave it caches to write, but walked every entry twice a grading: 9 s to make
and 55 s to remove for the Hub's 92,000 entries, 21 to 33 s to remove the datasets
cache's 10,000 (docs/measurements.md).

Here the shared cache is the lower layer of an overlayfs mounted by mlra (root) in the
grader's scratch folder, nosuid and nodev. The kernel's overlayfs never writes to a
lower layer: what the grader writes, renames or removes lands in the upper layer (a
copy made on first write, a whiteout for a removal), which lies in the scratch folder,
under its quota, and goes with it. The shared cache is also shown read-only at its own
path, as before. The upper layer is laid out before the mount with a folder, the
grader's, for each folder of the cache that any user may list and enter, so the grader
may add a blob, a snapshot link, a ref or an arrow file where the cache has its folders
(the overlay checks a folder's permissions on its upper copy); a folder others may not
enter gets none, so it stays root's and closed, as it was. Its files keep their owners
and modes: a blob of root's 0644 is read, not written or chmod'ed (the grader may
replace it in its own view, as it may remove it). Locks are the grader's afresh (a
root-owned lock left by an earlier load would not open for writing): the Hub's `.locks`
is opaque in the upper layer, and each of the datasets cache's `*.lock` files is hidden
by a whiteout (`LOCKS_HIDDEN`). Only folders (and those whiteouts) are made and
removed: 2,001 for a Hub cache of 400 repositories of 100 files, against its 82,000
entries.

Where no overlay can be had (mlra not root, no overlayfs, a path overlayfs cannot take)
the caller mirrors the folder as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
from pathlib import Path

from mlra.tools.sandbox import trees
from mlra.tools.sandbox.volume_users import unescape

OVERLAYS = ".overlays"
"""In the grader's caches folder: each overlay's upper and work folders, mlra's (0700)."""
LOCKS = ".locks"
MS_NOSUID = 2
MS_NODEV = 4
MNT_DETACH = 2
OPAQUE = "trusted.overlay.opaque"
LOCK_SUFFIX = ".lock"
OTHERS_ENTER = stat.S_IROTH | stat.S_IXOTH
UNSAFE = frozenset(",:\\\n")
"""Characters overlayfs's mount options cannot carry in a path."""


def overlay(
    source: Path, target: Path, state: Path, owner: int | None, *, lock_files: bool = False
) -> bool:
    """Mount `source` at `target` (a folder made here, `owner`'s) under an upper layer
    in `state` (made here); False, and nothing left, where it cannot be had.
    `lock_files`: the cache keeps its locks beside what they guard (datasets'), each
    hidden by a whiteout; else in a `.locks` folder at its top (the Hub's), made opaque."""
    upper, work = state / "upper", state / "work"
    paths = [str(p) for p in (source, target, upper, work)]
    if os.geteuid() != 0 or any(c in UNSAFE for p in paths for c in p):
        return False
    try:
        if os.lstat(source).st_mode & OTHERS_ENTER != OTHERS_ENTER:
            return False  # closed to the grader as it is: the mirror's links say so too
        state.parent.mkdir(mode=0o700, exist_ok=True)  # mlra's: the grader never enters
        os.chmod(state.parent, 0o700)
        state.mkdir(mode=0o700)
        work.mkdir(mode=0o700)
        _layout(source, upper, owner, lock_files=lock_files)
        target.mkdir()
        _own(str(target), owner)
        options = f"lowerdir={source},upperdir={upper},workdir={work}"
        _mount(str(target), options)
    except OSError:
        with contextlib.suppress(OSError):
            target.rmdir()
        trees.remove_tree(state, ignore_errors=True)
        return False
    return True


def detach_under(folder: Path) -> None:
    """Detach every mount below `folder` (this grading's overlays, or a killed mlra's),
    deepest first, so what is left there is the grader's layers alone."""
    prefix = f"{folder.resolve()}/"
    libc = ctypes.CDLL(None, use_errno=True)
    for point in mounts():
        if point.startswith(prefix):
            libc.umount2(point.encode(), MNT_DETACH)


def mounts() -> list[str]:
    """Where things are mounted here, deepest first (from /proc/self/mountinfo)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    found = [unescape(line.split()[4]) for line in lines if len(line.split()) > 4]
    return sorted(found, key=len, reverse=True)


def _layout(source: Path, upper: Path, owner: int | None, *, lock_files: bool) -> None:
    """The upper layer's folders: one for each folder of `source` that others may list
    and enter, `owner`'s; a whiteout over each `*.lock` file (`lock_files`), else
    `.locks` at the top opaque and empty."""
    upper.mkdir(mode=0o755)
    _own(str(upper), owner)
    todo = [(str(source), str(upper), True)]
    while todo:
        src, dst, top = todo.pop()
        try:
            with os.scandir(src) as found:
                entries = list(found)
        except OSError:
            continue
        for entry in entries:
            if top and entry.name == LOCKS and not lock_files:
                continue
            if (
                lock_files
                and entry.name.endswith(LOCK_SUFFIX)
                and not entry.is_dir(follow_symlinks=False)
            ):
                _whiteout(f"{dst}/{entry.name}")
                continue
            with contextlib.suppress(OSError):
                if not entry.is_dir(follow_symlinks=False):
                    continue
                if entry.stat(follow_symlinks=False).st_mode & OTHERS_ENTER != OTHERS_ENTER:
                    continue
                made = f"{dst}/{entry.name}"
                os.mkdir(made, 0o755)
                _own(made, owner)
                todo.append((entry.path, made, False))
    if lock_files:
        return
    locks = f"{upper}/{LOCKS}"  # raises where opaque folders cannot be had: mirrored then
    os.mkdir(locks, 0o755)
    _own(locks, owner)
    os.setxattr(locks, OPAQUE, b"y")


def _whiteout(path: str) -> None:
    """Hide the lower layer's file at `path` (overlayfs's whiteout: a 0/0 character
    device, which only root makes); the grader may make a file of that name afresh.
    Raises where it cannot be made: the caller mirrors the cache then (locks left out)."""
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(0, 0))


def _own(path: str, owner: int | None) -> None:
    if owner is not None:
        os.lchown(path, owner, owner)


def _mount(target: str, options: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    flags = MS_NOSUID | MS_NODEV
    if libc.mount(b"overlay", target.encode(), b"overlay", flags, options.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"overlay at {target}: {os.strerror(err)}")
