"""A sandbox's workspace quota, by the best mechanism this machine has.

Where a volume can be had (root, loop devices, mkfs.ext4: volume.py) the kernel keeps
the quota and its inode budget: a command past it gets ENOSPC, in its own output,
and the sandbox adds a line saying the workspace is full. No watcher runs then: the
command was not stopped, it failed to write, as on any full disk, and can go on
deleting or writing less. Elsewhere the du watcher (disk_quota.py) stops commands
once it sees the workspace over the quota, RLIMIT_FSIZE bounds each file, and a
notice says, once, that the quota is a poll. `in_force` records which one a sandbox
got (`disk_by` in `run_started`'s limits).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mlra.tools.sandbox import volume, volume_settle
from mlra.tools.sandbox.disk_quota import CHECK_INTERVAL_S, WorkspaceQuota
from mlra.tools.sandbox.start_step import made_or_undone

if TYPE_CHECKING:
    from mlra.events import LimitsInForce
    from mlra.tools.sandbox.base import SandboxSpec

logger = logging.getLogger(__name__)

OPEN_WAIT_S = 4 * volume_settle.COMMAND_TIMEOUT_S


class WorkspaceDisk:
    """One workspace's quota: a volume once started where one can be had, else the watcher."""

    def __init__(
        self,
        workspace: Path,
        limit_mb: int,
        *,
        inodes: int | None = None,
        use_volume: bool = True,
        default: bool = False,
    ) -> None:
        self.workspace = workspace
        self.limit_mb = limit_mb
        self.watcher = WorkspaceQuota(workspace, limit_mb)
        self.volume: volume.WorkspaceVolume | None = None
        self._inodes = inodes
        self._use_volume = use_volume
        self._default = default
        self.by: str | None = None

    @classmethod
    def for_spec(
        cls, workspace: Path, limit_mb: int | None, spec: SandboxSpec
    ) -> WorkspaceDisk | None:
        """A sandbox's quota as its spec asks for it (None: no quota); one place for the
        local and the Docker sandbox."""
        if not limit_mb:
            return None
        return cls(
            workspace,
            limit_mb,
            inodes=spec.disk_inodes,
            use_volume=spec.disk_volume,
            default=spec.disk_mb is None or spec.disk_shrinks,
        )

    @property
    def enforced(self) -> bool:
        return self.volume is not None or self.watcher.enforced

    @property
    def problem(self) -> str | None:
        return None if self.volume is not None else self.watcher.problem

    async def start(self, stop: Callable[[], Awaitable[None]]) -> list[str]:
        """Mount the volume, or start the watcher; returns notices. VolumeRefused (a
        SandboxError, one line) where the volume would take the runs disk's reserve."""
        why = volume.unavailable() if self._use_volume else "the sandbox asked for it"
        if why is None:
            made = volume.WorkspaceVolume(
                self.workspace, self.limit_mb, self._inodes, shrink=self._default
            )
            try:
                await _open_or_undo(made)
            except volume.VolumeFailed as exc:
                why = str(exc)
            except OSError as exc:  # the workspace vanished or cannot be opened meanwhile
                why = f"the volume could not be made: {exc.strerror or exc}"
            else:
                self.volume, self.limit_mb = made, made.size_mb
                self.by = made.describe()
                return []
        self.by = f"du watcher ({why})"
        notices = []
        if self._use_volume and self.watcher.enforced:
            notices.append(
                f"the workspace's disk quota of {self.limit_mb:,} MB is checked every "
                f"{CHECK_INTERVAL_S} s, not kept by the kernel ({why}): a command can write "
                "past it between two checks; each file is bounded by the file size limit"
            )
        over = await self.watcher.start(stop)
        return [*notices, *([over] if over else [])]

    async def close(self) -> str | None:
        """Stop watching, or carry the workspace off its volume (the sandbox's processes
        must be gone); a line where the volume could not be undone."""
        await self.watcher.close()
        made, self.volume = self.volume, None
        if made is None:
            return None
        problem = await asyncio.to_thread(made.close)
        if problem is not None:
            logger.warning("%s: %s", self.workspace, problem)
        return problem

    def in_force(self, limits: LimitsInForce) -> LimitsInForce:
        """`limits` with the quota and what keeps it."""
        if self.volume is not None:
            update = {
                "disk_mb": self.limit_mb,
                "disk_check_s": None,
                "disk_by": self.by,
                "disk_inodes": self.volume.inodes,
            }
        elif self.watcher.enforced:
            update = {
                "disk_mb": self.limit_mb,
                "disk_check_s": CHECK_INTERVAL_S,
                "disk_by": self.by,
            }
        else:
            return limits
        return limits.model_copy(update=update)

    # --- what the sandbox asks of it --------------------------------------------------

    async def clear_to_start(self) -> None:
        if self.volume is None:
            await self.watcher.clear_to_start()

    @property
    def stops(self) -> int:
        return self.watcher.stops

    def note_since(self, stops_before: int, output: str = "") -> str | None:
        if self.volume is not None:
            return self.volume.full_note(output)
        return self.watcher.note_since(stops_before)

    def claim(self, nbytes: int) -> str | None:
        if self.volume is not None:
            return self.volume.claim(nbytes)
        return self.watcher.claim(nbytes)

    def room(self) -> int:
        if self.volume is not None:
            return self.volume.room()
        return self.watcher.room()


async def _open_or_undo(made: volume.WorkspaceVolume) -> None:
    """Open `made`; a start cancelled meanwhile (an attempt stopped as its sandbox starts)
    undoes it before it raises (start_step.py): the thread mounts the volume whatever
    becomes of its awaiter, and a volume no sandbox records is one its close never
    undoes: it stayed mounted, its loop device and image held, until a later mlra's
    sandbox settled it. The workspace's copy onto it (an attempt's copy of its parent,
    gigabytes) stops at its next entry when told, the volume then dropped with it, the
    plain folder still whole; else waited for as long as its tools may take (mkfs,
    mount, the file being copied), past which the thread undoes it at its end."""
    stop = threading.Event()

    def opened() -> volume.WorkspaceVolume:
        made.open(stop)
        return made

    await made_or_undone(opened, _closed, OPEN_WAIT_S, stop=stop)


def _closed(made: volume.WorkspaceVolume) -> None:
    problem = made.close()
    if problem is not None:
        logger.warning("%s: %s", made.workspace, problem)
