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

An overlay is detached by what it is, never by where a path says it is: the scratch
folder is the grader's, so the submission may replace `hf-caches` with a link to /sys
(a detach of "every mount below it" would then take the host's cgroup tree, as root) or
move the overlay's folder elsewhere in the scratch folder (a detach by path would miss
it, and the shared cache would stay mounted in the run folder). Each overlay carries as
its mount source a tag saying what it is and of which of mlra's work folders
(`tag_for`: `mlra-hub-DIGEST` for the Hub's cache, `mlra-datasets-DIGEST` for datasets';
`findmnt` shows it), which only root can mount and the grader cannot change; `detach`
finds the work folder's tags in /proc/self/mountinfo, opens where the mount now is a
folder at a time, following no link, checks that what it opened is that very mount, and
detaches it through the open descriptor, so a path the grader swaps meanwhile leads to
nothing else. A killed mlra's overlays carry the same tags, so the next grading in that
folder detaches them; an older mlra named its datasets overlay `mlra-hub-` too, which is
among the tags looked for.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import stat
import threading
from collections.abc import Iterable
from pathlib import Path

from mlra.tools.sandbox import trees
from mlra.tools.sandbox.volume_users import mountinfo, source_fields, unescape

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
KINDS = ("hub", "datasets")
"""What an overlay holds, named in its mount source (`tag_for`): the Hub's cache first,
the tag an older mlra gave every overlay of its work folder."""
DETACH_ROUNDS = 5
"""How often `detach` looks again for a tagged mount it could not yet check (the grader's
folder moved as it was opened): the grader's processes are stopped before, so a round
or two."""
STEP = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""How `detach` walks to a mount: a folder at a time, a link nowhere followed."""


def tag_for(work_dir: Path, kind: str) -> str:
    """The mount source of a grading's overlay of `kind` (of KINDS) in `work_dir` (mlra's
    own folder, resolved): the same for a killed mlra's, so the next grading finds it."""
    digest = hashlib.sha256(str(work_dir.resolve()).encode()).hexdigest()[:32]
    return f"mlra-{kind}-{digest}"


def tags_for(work_dir: Path) -> frozenset[str]:
    """Every tag a grading's overlays in `work_dir` carry, an older mlra's among them."""
    return frozenset(tag_for(work_dir, kind) for kind in KINDS)


def overlay(
    source: Path,
    target: Path,
    state: Path,
    owner: int | None,
    tag: str,
    *,
    lock_files: bool = False,
    stop: threading.Event | None = None,
) -> bool:
    """Mount `source` at `target` (a folder made here, `owner`'s) under an upper layer
    in `state` (made here), its mount source `tag`; False, and nothing left, where it
    cannot be had or `stop` was set before the mount (its grading gave up). `lock_files`:
    the cache keeps its locks beside what they guard (datasets'), each hidden by a
    whiteout; else in a `.locks` folder at its top (the Hub's), made opaque."""
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
        _layout(source, upper, owner, lock_files=lock_files, stop=stop)
        target.mkdir()
        _own(str(target), owner)
        if stop is not None and stop.is_set():
            raise InterruptedError("the grading gave up")
        options = f"lowerdir={source},upperdir={upper},workdir={work}"
        _mount(tag, str(target), options)
    except OSError:
        with contextlib.suppress(OSError):
            target.rmdir()
        trees.remove_tree(state, ignore_errors=True)
        return False
    return True


def detach(tags: Iterable[str]) -> int:
    """Detach every overlay whose mount source is one of `tags`, wherever the grader moved
    it; how many are left (none where all went)."""
    tags = frozenset(tags)
    left = tagged(tags)
    for _ in range(DETACH_ROUNDS):
        for mount_id, point in left:
            _detach_mount(mount_id, point)
        left = tagged(tags)
        if not left:
            break
    return len(left)


def tagged(tags: Iterable[str]) -> list[tuple[int, str]]:
    """(mount id, where it is mounted) of each overlay here whose mount source is one of
    `tags`."""
    wanted = frozenset(tags)
    found = []
    for fields in _mountinfo():
        rest = source_fields(fields)
        if len(rest) > 1 and rest[0] == "overlay" and unescape(rest[1]) in wanted:
            found.append((int(fields[0]), unescape(fields[4])))
    return found


def mounts() -> list[str]:
    """Where things are mounted here, deepest first (from /proc/self/mountinfo)."""
    found = [unescape(fields[4]) for fields in _mountinfo()]
    return sorted(found, key=len, reverse=True)


def _mountinfo() -> list[list[str]]:
    try:
        lines = mountinfo()
    except OSError:
        return []
    return [fields for fields in lines if len(fields) > 6]


def _detach_mount(mount_id: int, point: str) -> None:
    """Detach mount `mount_id`, last seen at `point`: opened there (`_walk_to`), and
    detached through the descriptor only if it is that mount."""
    fd = _walk_to(point)
    if fd is None:
        return  # moved meanwhile: found again at its new place, next round
    try:
        if _mount_id(fd) != mount_id:
            return  # not ours: the grader put something else at that path
        libc = ctypes.CDLL(None, use_errno=True)
        libc.umount2(f"/proc/self/fd/{fd}".encode(), MNT_DETACH)
    finally:
        os.close(fd)


def _walk_to(point: str) -> int | None:
    """`point` opened a folder at a time from /, no link followed (a link the grader put
    on the way ends the walk), whatever its length; None where it cannot be reached."""
    fd = os.open("/", STEP)
    for name in point.split("/"):
        if not name:
            continue
        try:
            step = os.open(name, STEP, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = step
    return fd


def _mount_id(fd: int) -> int | None:
    """The mount an open descriptor is on (its fdinfo's mnt_id)."""
    try:
        text = Path(f"/proc/self/fdinfo/{fd}").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "mnt_id":
            return int(value)
    return None


def _layout(
    source: Path,
    upper: Path,
    owner: int | None,
    *,
    lock_files: bool,
    stop: threading.Event | None = None,
) -> None:
    """The upper layer's folders: one for each folder of `source` that others may list
    and enter, `owner`'s; a whiteout over each `*.lock` file (`lock_files`), else
    `.locks` at the top opaque and empty. Cut short once `stop` is set."""
    upper.mkdir(mode=0o755)
    _own(str(upper), owner)
    todo = [(str(source), str(upper), True)]
    while todo:
        if stop is not None and stop.is_set():
            return
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


def _mount(tag: str, target: str, options: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    flags = MS_NOSUID | MS_NODEV
    if libc.mount(tag.encode(), target.encode(), b"overlay", flags, options.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"overlay at {target}: {os.strerror(err)}")
