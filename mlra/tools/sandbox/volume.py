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
  right); any later sandbox set up on this machine settles it (volume_settle.py), also
  one whose image was deleted under it (its run folder removed by hand).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import threading
from pathlib import Path

from mlra.tools.sandbox.base import SandboxError
from mlra.tools.sandbox.default_limits import MIB
from mlra.tools.sandbox.disk_claim import SpaceNotSetAside, SpaceRefused, set_aside
from mlra.tools.sandbox.volume_copy import (
    DIR_FLAGS,
    CopyStopped,
    clear_folder,
    copy_root_meta,
    copy_tree,
)
from mlra.tools.sandbox.volume_settle import (
    MOVED,
    TAG,
    TOOLS_PATH,
    VolumeFailed,
    run_tool,
    settle,
    settle_stale,
    stale_at,
    unmount,
    write_left_under,
)

BYTES_PER_INODE = 16 * 1024
MAX_INODES = 2_000_000
"""A workspace of millions of files is a walk of minutes for every reader of it."""
MIN_INODES = 64


class VolumeRefused(SandboxError):
    """The volume asked for would take the runs disk's reserve: the sandbox does not start."""


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


ENOSPC = "No space left on device"
"""What a command refused room says (strerror(ENOSPC))."""


def default_inodes(size_mb: int) -> int:
    return max(MIN_INODES, min(MAX_INODES, size_mb * MIB // BYTES_PER_INODE))


def _mb(nbytes: float) -> str:
    return f"{nbytes / MIB:,.0f} MB"


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

    def open(self, stop: threading.Event | None = None) -> None:
        """Make the image, mount it over the workspace and carry the workspace onto it.
        VolumeRefused: it would take the reserve; VolumeFailed: it cannot be had here, or
        `stop` was set as the workspace was carried onto it (its start gave up: the copy
        so far is dropped with the volume, the plain folder still holds all)."""
        folder = self.workspace.parent
        settle_stale(folder)
        if (left := stale_at(self.workspace)) is not None:
            raise VolumeFailed(
                f"a killed mlra's volume ({left.name}) is still mounted at the workspace and "
                "still in use (by a container, or a process working in it: one the killed "
                "mlra left running, or a shell in that folder); the run goes on in it"
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
            run_tool(
                "mkfs.ext4", "-q", "-F", "-b", "4096", "-m", "0", "-N", str(self.inodes_asked),
                "-O", "^has_journal", "-L", "mlra-workspace",
                "-E", "lazy_itable_init=1,nodiscard", str(image),
            )  # fmt: skip
            self._mount_and_move(image, stop)
        except BaseException:
            with contextlib.suppress(OSError):
                image.unlink()
            os.close(self._lock)
            self.image, self._lock = None, None
            raise

    def _mount_and_move(self, image: Path, stop: threading.Event | None) -> None:
        under = os.open(self.workspace, DIR_FLAGS)
        try:
            run_tool("mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noinit_itable",
                 str(image), str(self.workspace))  # fmt: skip
            try:
                on = os.open(self.workspace, DIR_FLAGS)
            except OSError:
                unmount(self.workspace)
                raise
            try:
                if os.fstat(on).st_dev == os.fstat(under).st_dev:
                    raise VolumeFailed("the volume did not appear at the workspace")
                with contextlib.suppress(OSError):
                    os.rmdir("lost+found", dir_fd=on)
                st = os.statvfs(on)
                self.inodes, self.usable_mb = st.f_files, st.f_blocks * st.f_frsize // MIB
                self._move(under, on, image, stop)
            except BaseException:
                os.close(on)
                unmount(self.workspace)
                raise
            os.close(on)
        finally:
            os.close(under)

    def _move(self, under: int, on: int, image: Path, stop: threading.Event | None) -> None:
        try:
            copy_tree(under, on, stop)
        except CopyStopped:
            raise VolumeFailed("its sandbox's start was given up as it was made") from None
        except OSError as exc:
            raise VolumeFailed(
                f"the workspace does not fit in its volume ({exc.strerror})"
            ) from None
        copy_root_meta(under, on)
        moved = Path(f"{image}{MOVED}")
        moved.touch(0o600)  # empty: all that is under the volume is an old copy
        # From here the volume holds the workspace: what cannot be removed from under it
        # stays hidden there, is named in the mark, and is cleared before the volume is
        # carried back; only that, since what is written to the plain folder once the
        # volume is off it (a researcher's file, as a killed run's volume is settled) is
        # not an old copy.
        with contextlib.suppress(OSError):
            clear_folder(under)
        with contextlib.suppress(OSError):
            write_left_under(moved, os.listdir(under))

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

    def full_note(self, output: str = "") -> str | None:
        """A line for a command that ended with the volume full (its own output said
        ENOSPC, "No space left on device"; this says which limit it was). A volume with
        under 1 MiB left is full; one whose command was refused room (`output` says
        ENOSPC) is full with up to an eighth of it left: ext4 keeps blocks back for its
        own records, so on a small volume a write is refused with over 1 MiB still
        counted free (a 20 MB volume: 1.8 MB)."""
        try:
            st = os.statvfs(self.workspace)
        except OSError:
            return None
        left = st.f_bavail * st.f_frsize
        refused = ENOSPC in output and left < min(self.size_mb * MIB // 8, 256 * MIB)
        if st.f_favail == 0:
            what = f"all {self.inodes:,} files and folders it may hold"
        elif left < MIB or refused:
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
