"""The workspace on a file system of its own: a disk quota the kernel keeps.

A quota checked by polling can be outrun (`fallocate` took 1.7 GB in 10 ms against a
913 MB quota) or missed altogether (200,000 empty files are 4 MB to `du`). So where
mlra is root and the machine has loop devices and `mkfs.ext4`, a sandbox's workspace
is an ext4 file system image exactly the size of its disk quota, with an inode
budget, mounted at the workspace's own path (`nosuid,nodev`) while the sandbox is
up: past the quota, `write`, `fallocate` and `creat` fail with ENOSPC inside the
sandbox, whatever the agent does and however fast.

- The image is `fallocate`d, so the host's space is really set aside: a sparse image
  would let the host disk fill under it and turn the host's ENOSPC into I/O errors
  inside. No `discard` anywhere (mkfs's would punch the reservation back out). It
  lies beside the workspace in the run's folder (`.workspace.mlra-volume-PID-TOKEN.img`),
  which no sandbox sees, and is made with lazy inode tables and no journal: a few
  tens of milliseconds, however large (docs/measurements.md).
- The inode budget is ext4's usual one inode per 16 KiB, at most `MAX_INODES`.
- What the workspace held (starter files, a resumed run's, an attempt's copy of its
  parent) is carried onto the volume when it is mounted; when the sandbox closes,
  everything is carried back to a plain folder at the same path (volume_copy.py:
  holes, hard links, owners, modes and times kept), the volume unmounted and the
  image deleted. Whatever reads a run's workspace afterwards sees a plain folder.
- A volume never takes the runs disk's reserve (default_limits.py): an asked-for quota
  that would is refused with one line; the default one is made smaller. Its size is
  chosen and its space reserved with the disk held (disk_claim.py), so volumes made at
  once each see what the one before took.
- An mlra killed with its volume mounted leaves it there (the workspace still reads
  right). Names carry the owner's pid, and the owner holds an exclusive `flock` on its
  image for as long as it lives, so any later sandbox set up on this machine settles
  the volumes of owners that are gone (the lock free, and the pid dead or, for a mounted
  one, running something else: a reused pid or an unreaped zombie is not taken for the
  owner, and two settlers never settle one volume twice): carried back, unmounted,
  deleted; not while a killed run's container still has it (volume_users.py): the next
  Docker start removes that container first, and a resume goes on in it meanwhile.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mlra.tools.sandbox import run_uid
from mlra.tools.sandbox.base import SandboxError
from mlra.tools.sandbox.default_limits import MIB
from mlra.tools.sandbox.disk_claim import SpaceNotSetAside, SpaceRefused, set_aside
from mlra.tools.sandbox.volume_copy import DIR_FLAGS, clear_folder, copy_root_meta, copy_tree
from mlra.tools.sandbox.volume_users import loop_mounts, still_used, used_elsewhere

logger = logging.getLogger(__name__)

TAG = "mlra-volume"
IMAGE_NAME = re.compile(rf"^\.(?P<ws>.+)\.{TAG}-(?P<pid>\d+)-(?P<token>[0-9a-f]+)\.img$")
MOVED = ".moved"
"""Beside an image once the workspace's old contents are on it (and gone from under it):
settling it then clears the folder under the mount before carrying the volume back."""
VIEW_PREFIX = f".{TAG}-view-"
BYTES_PER_INODE = 16 * 1024
MAX_INODES = 2_000_000
"""A workspace of millions of files is a walk of minutes for every reader of it."""
MIN_INODES = 64
TOOLS_PATH = "/usr/sbin:/sbin:/usr/bin:/bin"
COMMAND_TIMEOUT_S = 120.0


class VolumeRefused(SandboxError):
    """The volume asked for would take the runs disk's reserve: the sandbox does not start."""


class VolumeFailed(Exception):
    """The volume could not be made here; the quota falls back to the du watcher."""


def unavailable() -> str | None:
    """Why no volume can be made on this machine (a few words), or None."""
    if os.geteuid() != 0:
        return "not root"
    if not Path("/dev/loop-control").exists() and not Path("/dev/loop0").exists():
        return "no loop device"
    for tool in ("mkfs.ext4", "mount", "umount"):
        if shutil.which(tool, path=TOOLS_PATH) is None:
            return f"no {tool}"
    return None


def default_inodes(size_mb: int) -> int:
    return max(MIN_INODES, min(MAX_INODES, size_mb * MIB // BYTES_PER_INODE))


def _run(*argv: str) -> None:
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


def _unmount(path: Path) -> None:
    """Unmount, detached lazily where something still holds it (a container's namespace)."""
    try:
        _run("umount", str(path))
    except VolumeFailed:
        _run("umount", "-l", str(path))


def _mb(nbytes: float) -> str:
    return f"{nbytes / MIB:,.0f} MB"


@dataclass
class Settled:
    """A volume carried back to its folder (or not), for a notice."""

    workspace: Path
    problem: str | None = None


class WorkspaceVolume:
    """One sandbox's workspace volume: made and mounted by `open`, undone by `close`."""

    def __init__(
        self, workspace: Path, size_mb: int, inodes: int | None = None, *, shrink: bool = False
    ) -> None:
        self.workspace = workspace
        self.size_mb = size_mb
        self.shrink = shrink
        """A default quota: made smaller where it would take the reserve, not refused."""
        self.inodes_asked = inodes or default_inodes(size_mb)
        self.inodes = 0
        """As made (mkfs rounds up to fill its inode tables)."""
        self.usable_mb = 0
        self.image: Path | None = None
        self._lock: int | None = None
        """The image opened and flock'ed while this process owns it."""

    def describe(self) -> str:
        return (
            f"ext4 image (loop), {self.size_mb:,} MB ({self.usable_mb:,} MB usable), "
            f"{self.inodes:,} inodes"
        )

    # --- making it ----------------------------------------------------------------------

    def open(self) -> None:
        """Make the image, mount it over the workspace and carry the workspace onto it.
        VolumeRefused: it would take the reserve; VolumeFailed: it cannot be had here."""
        folder = self.workspace.parent
        settle_stale(folder)
        if (left := stale_at(self.workspace)) is not None:
            raise VolumeFailed(
                f"a killed mlra's volume ({left.name}) is still mounted at the workspace and "
                "in use in another mount namespace (a container?); the run goes on in it"
            )
        image = folder / f".{self.workspace.name}.{TAG}-{os.getpid()}-{secrets.token_hex(4)}.img"
        try:
            made = set_aside(folder, image, self.size_mb, shrink=self.shrink)
        except SpaceRefused as exc:
            raise VolumeRefused(str(exc)) from None
        except SpaceNotSetAside as exc:
            raise VolumeFailed(str(exc)) from None
        if made < self.size_mb:  # others took space since the default was chosen
            self.size_mb = made
            self.inodes_asked = min(self.inodes_asked, default_inodes(made))
        self.image = image
        self._lock = os.open(image, os.O_RDONLY | os.O_CLOEXEC)
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        try:
            _run(
                "mkfs.ext4", "-q", "-F", "-b", "4096", "-m", "0", "-N", str(self.inodes_asked),
                "-O", "^has_journal", "-L", "mlra-workspace",
                "-E", "lazy_itable_init=1,nodiscard", str(image),
            )  # fmt: skip
            self._mount_and_move(image)
        except BaseException:
            with contextlib.suppress(OSError):
                image.unlink()
            os.close(self._lock)
            self.image, self._lock = None, None
            raise

    def _mount_and_move(self, image: Path) -> None:
        under = os.open(self.workspace, DIR_FLAGS)
        try:
            _run("mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noinit_itable",
                 str(image), str(self.workspace))  # fmt: skip
            try:
                on = os.open(self.workspace, DIR_FLAGS)
            except OSError:
                _unmount(self.workspace)
                raise
            try:
                if os.fstat(on).st_dev == os.fstat(under).st_dev:
                    raise VolumeFailed("the volume did not appear at the workspace")
                with contextlib.suppress(OSError):
                    os.rmdir("lost+found", dir_fd=on)
                st = os.statvfs(on)
                self.inodes, self.usable_mb = st.f_files, st.f_blocks * st.f_frsize // MIB
                self._move(under, on, image)
            except BaseException:
                os.close(on)
                _unmount(self.workspace)
                raise
            os.close(on)
        finally:
            os.close(under)

    def _move(self, under: int, on: int, image: Path) -> None:
        try:
            copy_tree(under, on)
        except OSError as exc:
            raise VolumeFailed(
                f"the workspace does not fit in its volume ({exc.strerror})"
            ) from None
        copy_root_meta(under, on)
        Path(f"{image}{MOVED}").touch(0o600)
        # From here the volume holds the workspace: what cannot be removed from under it
        # stays hidden there, and is cleared before the volume is carried back.
        with contextlib.suppress(OSError):
            clear_folder(under)

    # --- while it is up ---------------------------------------------------------------

    def room(self) -> int:
        """Bytes the workspace may still grow by."""
        try:
            st = os.statvfs(self.workspace)
        except OSError:
            return 0
        return st.f_bavail * st.f_frsize

    def claim(self, nbytes: int) -> str | None:
        room = self.room()
        if nbytes <= room:
            return None
        return (
            f"not written: {_mb(nbytes)} would take the workspace over its disk quota of "
            f"{self.size_mb:,} MB ({_mb(room)} left); delete files first"
        )

    def full_note(self) -> str | None:
        """A line for a command that ended with the volume full (its own output said
        ENOSPC, "No space left on device"; this says which limit it was)."""
        try:
            st = os.statvfs(self.workspace)
        except OSError:
            return None
        if st.f_favail == 0:
            what = f"all {self.inodes:,} files and folders it may hold"
        elif st.f_bavail * st.f_frsize < MIB:
            what = f"its disk quota of {self.size_mb:,} MB"
        else:
            return None
        return f"[the workspace is full: it holds {what}. Delete files to make room]"

    # --- undoing it ---------------------------------------------------------------------

    def close(self) -> str | None:
        """Carry the workspace back to a plain folder, unmount, delete the image; a line
        saying what is left where that failed (the volume then stays mounted)."""
        image, self.image = self.image, None
        lock, self._lock = self._lock, None
        if image is None or lock is None:
            return None
        return settle(image, self.workspace, mounted=True, lock=lock).problem


def _take(image: Path, *, wait: bool = False) -> int | None:
    """The image's lock, where no living process holds it and the image is still there.
    `wait`: another settler holding it is waited for (its owner is gone, and owners'
    locks are close-on-exec, so only a settler holds it, for as long as its copy-back)."""
    try:
        fd = os.open(image, os.O_RDONLY | os.O_CLOEXEC)
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


def settle(image: Path, workspace: Path, *, mounted: bool, lock: int) -> Settled:
    """Carry a volume's files back to the plain folder at `workspace`, unmount it and
    delete its image; `lock` is the image's flock'ed descriptor, closed here. `mounted`:
    the volume is mounted at `workspace` (else it is only the image, after a reboot)."""
    try:
        return _settle(image, workspace, mounted=mounted)
    finally:
        os.close(lock)


def _settle(image: Path, workspace: Path, *, mounted: bool) -> Settled:
    view = Path(tempfile.mkdtemp(prefix=VIEW_PREFIX, dir=image.parent))
    moved = Path(f"{image}{MOVED}")
    try:
        if mounted:
            _run("mount", "--bind", str(workspace), str(view))
            _unmount(workspace)
        else:
            _run("mount", "-t", "ext4", "-o", "loop,ro,nosuid,nodev,noexec",
                 str(image), str(view))  # fmt: skip
    except VolumeFailed as exc:
        with contextlib.suppress(OSError):
            view.rmdir()
        return Settled(workspace, f"the workspace's volume could not be undone: {exc}")
    try:
        _carry_back(view, workspace, cleared=moved.exists())
    except OSError as exc:
        problem = f"its files could not be copied off it ({exc.strerror})"
        if mounted:
            with contextlib.suppress(VolumeFailed):
                _run("mount", "--bind", str(view), str(workspace))
        with contextlib.suppress(VolumeFailed):
            _unmount(view)
        with contextlib.suppress(OSError):
            view.rmdir()
        return Settled(
            workspace,
            f"the workspace's volume is kept ({image.name}): {problem}; free space on the "
            "runs disk and the next mlra started here carries it back",
        )
    with contextlib.suppress(VolumeFailed):
        _unmount(view)
    with contextlib.suppress(OSError):
        view.rmdir()
    for done in (image, moved):
        with contextlib.suppress(FileNotFoundError):
            done.unlink()
    return Settled(workspace)


def _carry_back(view: Path, workspace: Path, *, cleared: bool) -> None:
    src = os.open(view, DIR_FLAGS)
    try:
        dst = os.open(workspace, DIR_FLAGS)
        try:
            if cleared:
                clear_folder(dst)  # what is under is an old copy: the volume has it all
            copy_tree(src, dst)
            copy_root_meta(src, dst)
        except OSError:
            with contextlib.suppress(OSError):
                if cleared:
                    clear_folder(dst)  # a partial copy, not to be taken for the workspace
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
    """A gone owner's volume still mounted at `workspace` (in use elsewhere): a volume
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
            continue  # a killed run's container still writes to it (volume_users.py)
        lock = _take(image, wait=gone and image.parent == own)
        if lock is None:
            continue  # its owner lives, another mlra is settling it (not ours to wait for), or has
        if not gone and used_elsewhere(image, points):
            os.close(lock)
            continue
        workspace = image.parent / match["ws"]
        for point in points:  # a copy-back cut short: its view
            if point.name.startswith(VIEW_PREFIX):
                with contextlib.suppress(VolumeFailed):
                    _unmount(point)
                with contextlib.suppress(OSError):
                    point.rmdir()
        settled = settle(image, workspace, mounted=workspace in points, lock=lock)
        if settled.problem is not None:
            logger.warning("%s: %s", workspace, settled.problem)
        done.append(settled)
    return done


def settle_before_use(workspace: Path) -> None:
    """Before a sandbox is set up on `workspace` (a volume or not): undo what owners that
    are gone left (binds first: run_uid.sweep; then volumes, its own folder's included)."""
    if os.geteuid() != 0:
        return
    run_uid.sweep()
    try:
        settle_stale(workspace.parent)
    except (OSError, VolumeFailed) as exc:
        logger.warning("workspace volumes left by mlra processes that are gone: %s", exc)
