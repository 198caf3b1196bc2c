"""Undoing workspace volumes (volume.py makes them): one's own as its sandbox closes, and
those that mlra processes which are gone left mounted, their images deleted or not.

Carried back to a plain folder at the workspace's path (volume_copy.py), unmounted, the
image deleted. An owner holds an exclusive `flock` on its image for as long as it lives,
so the volumes of owners that are gone are told by the lock being free and the pid in
the image's name dead or, for a mounted one, running something else (a reused pid or an
unreaped zombie is not taken for the owner; two settlers never settle one volume twice).
An image deleted while mounted (its run folder removed by hand) is no longer opened by
path: no process holding it open tells that its owner is gone, and its loop device's
lock keeps settlers apart (volume_users.take_deleted). Where its whole run folder went
(`rm -rf` emptied the volume and removed all but the mount point, which it could not),
nothing is carried back: the volume is dropped and the emptied folders removed, so the
run folder the researcher removed does not come back as a shell. Only empty folders
are removed: what the volume or the folder under it still holds is carried back or kept.
Not while a killed run's container still has it (volume_users.py): the next Docker start
removes that container first.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mlra.tools.sandbox import accounts, run_uid
from mlra.tools.sandbox.volume_copy import DIR_FLAGS, clear_folder, copy_root_meta, copy_tree
from mlra.tools.sandbox.volume_users import loop_mounts, still_used, take_deleted, used_elsewhere

logger = logging.getLogger(__name__)

TAG = "mlra-volume"
IMAGE_NAME = re.compile(rf"^\.(?P<ws>.+)\.{TAG}-(?P<pid>\d+)-(?P<token>[0-9a-f]+)\.img$")
MOVED = ".moved"
"""Beside an image once the workspace's old contents are on it (and gone from under it):
settling it then clears the folder under the mount before carrying the volume back."""
VIEW_PREFIX = f".{TAG}-view-"
TOOLS_PATH = "/usr/sbin:/sbin:/usr/bin:/bin"
COMMAND_TIMEOUT_S = 120.0


class VolumeFailed(Exception):
    """The volume could not be made here; the quota falls back to the du watcher."""


def run_tool(*argv: str) -> None:
    tool = shutil.which(argv[0], path=TOOLS_PATH) or argv[0]
    try:
        done = subprocess.run(
            [tool, *argv[1:]],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VolumeFailed(f"{argv[0]}: {exc}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
        raise VolumeFailed(f"{argv[0]}: {said[-1] if said else f'exit {done.returncode}'}")


def unmount(path: Path) -> None:
    """Unmount, detached lazily where something still holds it (a container's namespace)."""
    try:
        run_tool("umount", str(path))
    except VolumeFailed:
        run_tool("umount", "-l", str(path))


@dataclass
class Settled:
    """A volume carried back to its folder (or not), for a notice."""

    workspace: Path
    problem: str | None = None


def _take(image: Path, *, wait: bool = False) -> int | None:
    """The image's lock, where no living process holds it and the image is still there.
    `wait`: another settler holding it is waited for (its owner is gone, and owners'
    locks are close-on-exec, so only a settler holds it, for as long as its copy-back)."""
    try:
        fd = os.open(image, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:  # deleted while mounted: its loop device's lock instead
        return take_deleted(image, wait=wait)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_nlink > 0:  # not settled (and deleted) by another meanwhile
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def settle(
    image: Path, workspace: Path, *, mounted: bool, lock: int, owner_gone: bool = False
) -> Settled:
    """Carry a volume's files back to the plain folder at `workspace`, unmount it and
    delete its image; `lock` is the image's flock'ed descriptor, closed here. `mounted`:
    the volume is mounted at `workspace` (else it is only the image, after a reboot).
    `owner_gone`: a killed mlra's, whose run folder, if removed by hand, stays removed
    (a living owner still writes its run's records there)."""
    try:
        return _settle(image, workspace, mounted=mounted, owner_gone=owner_gone)
    finally:
        os.close(lock)


def _settle(image: Path, workspace: Path, *, mounted: bool, owner_gone: bool) -> Settled:
    view = Path(tempfile.mkdtemp(prefix=VIEW_PREFIX, dir=image.parent))
    moved = Path(f"{image}{MOVED}")
    try:
        if mounted:
            run_tool("mount", "--bind", str(workspace), str(view))
            unmount(workspace)
        else:
            run_tool("mount", "-t", "ext4", "-o", "loop,ro,nosuid,nodev,noexec",
                 str(image), str(view))  # fmt: skip
    except VolumeFailed as exc:
        if mounted:  # bound, then the workspace would not unmount: the bind undone too
            with contextlib.suppress(VolumeFailed):
                unmount(view)
        with contextlib.suppress(OSError):
            view.rmdir()
        return Settled(workspace, f"the workspace's volume could not be undone: {exc}")
    if mounted and owner_gone and _run_folder_removed(image, workspace, view):
        with contextlib.suppress(VolumeFailed):
            unmount(view)
        _remove_emptied(workspace, view)
        return Settled(workspace)
    try:
        _carry_back(view, workspace, old=read_left_under(moved), moved=moved.exists())
    except OSError as exc:
        problem = f"its files could not be copied off it ({exc.strerror})"
        if mounted:
            with contextlib.suppress(VolumeFailed):
                run_tool("mount", "--bind", str(view), str(workspace))
        with contextlib.suppress(VolumeFailed):
            unmount(view)
        with contextlib.suppress(OSError):
            view.rmdir()
        return Settled(
            workspace,
            f"the workspace's volume is kept ({image.name}): {problem}; free space on the "
            "runs disk and the next mlra started here carries it back",
        )
    with contextlib.suppress(VolumeFailed):
        unmount(view)
    with contextlib.suppress(OSError):
        view.rmdir()
    for done in (image, moved):
        with contextlib.suppress(FileNotFoundError):
            done.unlink()
    return Settled(workspace)


def _run_folder_removed(image: Path, workspace: Path, view: Path) -> bool:
    """Whether the run folder was removed by hand (`rm -rf`) while the volume was
    mounted: its image is gone, the volume (at `view`, no longer at the workspace, so
    nothing writes to it meanwhile) holds nothing, and the run folder nothing but the
    workspace's mount point, which `rm` could not remove (and settlers' views)."""
    if image.exists():
        return False
    try:
        if os.listdir(view):
            return False
        left = [n for n in os.listdir(workspace.parent) if not n.startswith(VIEW_PREFIX)]
    except OSError:
        return False
    return left == [workspace.name]


def _remove_emptied(workspace: Path, view: Path) -> None:
    """The folders a removed run folder left, where empty: the workspace's (what was
    hidden under the mount stays, and with it the run folder), the view, the run
    folder. rmdir only: nothing anyone still has is removed."""
    for emptied in (workspace, view, workspace.parent):
        with contextlib.suppress(OSError):
            emptied.rmdir()


ALL_OLD: list[str] | None = None
"""`read_left_under`: all the folder under the volume holds is an old copy."""


def write_left_under(moved: Path, names: list[str]) -> None:
    """Name in the mark `moved` what is still under the volume once the workspace was
    moved onto it and the folder under cleared (normally nothing): the old copy that
    settling removes."""
    moved.write_text(json.dumps(names))


def read_left_under(moved: Path) -> list[str] | None:
    """The old copy's entries left under the volume: [] without a mark (the workspace
    was never moved onto it), ALL_OLD for an empty or unreadable mark (moved, and then
    killed before the names were written, or written by an mlra before these were)."""
    try:
        text = moved.read_text()
    except FileNotFoundError:
        return []
    except OSError:
        return ALL_OLD
    try:
        names = json.loads(text)
    except ValueError:
        return ALL_OLD
    if not isinstance(names, list) or not all(
        isinstance(n, str) and n not in ("", ".", "..") and "/" not in n for n in names
    ):
        return ALL_OLD
    return names


def _carry_back(view: Path, workspace: Path, *, old: list[str] | None, moved: bool) -> None:
    """`old`: the entries under the volume that are an old copy, removed first (the
    volume has it all); ALL_OLD: all of them. Nothing else in the plain folder is
    removed: a file written there once the volume was off it is kept. `moved`: the
    workspace was moved onto the volume, so a copy cut short is removed (the volume,
    kept, has it all)."""
    src = os.open(view, DIR_FLAGS)
    try:
        dst = os.open(workspace, DIR_FLAGS)
        try:
            if old != []:
                clear_folder(dst, old)
            copy_tree(src, dst)
            copy_root_meta(src, dst)
        except OSError:
            with contextlib.suppress(OSError):
                if moved:  # a partial copy, not to be taken for the workspace: what the
                    # volume has, and the old copy; a file written there meanwhile stays
                    clear_folder(dst, None if old is None else [*old, *os.listdir(src)])
            raise
        finally:
            os.close(dst)
    finally:
        os.close(src)


# --- volumes of mlra processes that are gone ----------------------------------------------


def _owner_gone(name: str) -> bool:
    """The pid in an image's name runs no process: none has it, or one that died and
    was not reaped yet (a zombie still has its /proc entry, and no lock)."""
    found = IMAGE_NAME.match(name)
    if found is None:
        return False
    try:
        stat = Path(f"/proc/{found['pid']}/stat").read_bytes()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] in (b"Z", b"X")


def stale_at(workspace: Path) -> Path | None:
    """A gone owner's volume still mounted at `workspace` (still in use): a volume
    stacked on it would be unmounted by whichever mlra settles it later."""
    for image, points in loop_mounts().items():
        if workspace.resolve() in points and _owner_gone(image.name):
            return image
    return None


def settle_stale(folder: Path | None = None) -> list[Settled]:
    """Settle the volumes of mlra processes that are gone: every one mounted on this
    machine, and the images left unmounted in `folder` (after a reboot). One of `folder`'s
    own that another mlra is settling is waited for: a sandbox set up on its workspace
    meanwhile would start on a volume half carried back (a resumed run's command then
    missed files its workspace held)."""
    done: list[Settled] = []
    own = folder.resolve() if folder is not None else None
    mounted = loop_mounts()
    # A mounted one whose pid runs is its owner's, locked for as long as it lives, or a
    # reused pid's: its lock tells (it is taken before the mount, dropped after it).
    found = {image: points for image, points in mounted.items() if IMAGE_NAME.match(image.name)}
    if folder is not None:
        with contextlib.suppress(OSError):
            for image in folder.resolve().iterdir():
                if image not in mounted and _owner_gone(image.name):
                    found[image] = []  # an owner not yet locked (its pid runs) is left be
    for image, points in found.items():
        match = IMAGE_NAME.match(image.name)
        gone = _owner_gone(image.name)
        if match is None or (
            gone and points and still_used(image, points, patient=image.parent == own)
        ):
            continue  # a killed run's container or grader still works in it (volume_users.py)
        lock = _take(image, wait=gone and image.parent == own)
        if lock is None:
            continue  # its owner lives, another mlra is settling it (not ours to wait for), or has
        # Where it is mounted now, its lock held: an owner's own close or another settler
        # may have unmounted it since the list above was read.
        points = loop_mounts().get(image, [])
        if not gone and used_elsewhere(image, points):
            os.close(lock)
            continue
        workspace = image.parent / match["ws"]
        if workspace not in points and not image.exists():
            os.close(lock)  # deleted, and on no path of ours but a view: its only copy
            continue
        for point in points:  # a copy-back cut short: its view
            if point.name.startswith(VIEW_PREFIX):
                with contextlib.suppress(VolumeFailed):
                    unmount(point)
                with contextlib.suppress(OSError):
                    point.rmdir()
        settled = settle(  # its lock taken: its owner is gone, whatever its pid runs now
            image, workspace, mounted=workspace in points, lock=lock, owner_gone=True
        )
        if settled.problem is not None:
            logger.warning("%s: %s", workspace, settled.problem)
        done.append(settled)
    return done


def settle_before_use(workspace: Path) -> None:
    """Before a sandbox is set up on `workspace` (a volume or not): undo what owners that
    are gone left (their accounts folders, any user's; as root, binds first:
    run_uid.sweep; then volumes, its own folder's included)."""
    accounts.sweep_gone()
    if os.geteuid() != 0:
        return
    run_uid.sweep()
    try:
        settle_stale(workspace.parent)
    except (OSError, VolumeFailed) as exc:
        logger.warning("workspace volumes left by mlra processes that are gone: %s", exc)
