"""The workspace's disk quota: measured while the sandbox runs, enforced by stopping it.

The fallback where the workspace cannot be a volume of its own, whose size the kernel
keeps (volume.py: root, loop devices and mkfs.ext4; workspace_disk.py chooses). No
file system this runs on can be counted on for quotas of its own (project quotas
need XFS or a prepared ext4), so the workspace's use is measured from outside: the
blocks its files hold on disk (`st_blocks`, so a sparse file counts what it really
takes and a hard link counts once), summed by `du` (no link followed, one file
system, iterative however deep the tree). A scan of a small workspace costs about
2 ms; a slow one spaces the next ones out (`SLOW_FACTOR` times the CPU it took, not
its wall time, which a loaded machine stretches), so the watcher never takes more than
a twentieth of a core.

When the workspace holds more than its quota, every command and background job of
the sandbox is stopped (the sandbox's `stop` callback) and each command that was
stopped gets a line saying so, with what the workspace holds. While it stays over
the quota only growth stops commands again, so the agent can still delete files.
mlra's own writes into the workspace (`write_file`, clones) are refused up front
when they would not fit.

Between two scans a command can write more than the quota allows (at 1 GB/s, half a
second is 500 MB): this bounds a run's disk, it is not a byte-exact quota.
`RLIMIT_FSIZE` remains the cap on any one file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

MIB = 1024 * 1024
CHECK_INTERVAL_S = 0.5
SLOW_FACTOR = 20
SCAN_TIMEOUT_S = 120.0
GROWTH_SLACK = MIB
"""While over the quota, growth by more than this stops commands again."""
STOP_WAIT_S = 60.0
"""The longest a command waits for a stop in progress before it starts anyway."""


def _mb(nbytes: int) -> str:
    return f"{nbytes / MIB:,.1f} MB"


class WorkspaceQuota:
    """One workspace's disk quota and the watcher that enforces it."""

    def __init__(self, workspace: Path, limit_mb: int) -> None:
        self.workspace = workspace
        self.limit_mb = limit_mb
        self.limit = limit_mb * MIB
        self.du = shutil.which("du", path="/usr/bin:/bin")
        self.used: int | None = None
        """Bytes the workspace held at the last scan, plus what mlra wrote since."""
        self.stops = 0
        """How many times the watcher stopped the sandbox's commands."""
        self.last_stop_note = ""
        self._floor: int | None = None
        """While over the quota: the least use seen since commands were last stopped."""
        self._task: asyncio.Task[None] | None = None
        self._stop_done: asyncio.Event | None = None
        """While the watcher is stopping the sandbox's commands: set when it is done."""

    @property
    def enforced(self) -> bool:
        return self.du is not None

    @property
    def problem(self) -> str | None:
        """Why the quota cannot be enforced here, for the log's notes."""
        if self.du is None:
            return "the workspace's disk quota is not enforced: no `du` in /usr/bin or /bin"
        return None

    # --- measuring ----------------------------------------------------------------------

    def measure(self) -> int | None:
        """The blocks the workspace holds, in bytes (blocking); None if it cannot be read."""
        if self.du is None:
            return None
        used, _ = self._scan([])
        return used

    def measure_inodes(self) -> int | None:
        """The files and folders the workspace holds (blocking), which its blocks do not
        show: 30,000 empty files are a few hundred KB to `du` and 30,000 inodes."""
        if self.du is None:
            return None
        try:
            done = subprocess.run(
                [self.du, "-s", "--inodes", "-x", "-P", "."],
                cwd=self.workspace,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=SCAN_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        total = _parse(done.stdout)
        return None if total is None else total // 1024

    async def measure_async(self) -> int | None:
        """As `measure`, off the event loop."""
        used, _ = await self._scan_async()
        return used

    async def _scan_async(self) -> tuple[int | None, float]:
        """The workspace's use and the CPU seconds du spent finding it.

        du runs in a thread that reaps it with wait4, so its own CPU time is known: the
        watcher spaces its scans by that, not by wall time, which on a loaded machine is
        mostly waiting for a core (spaced by wall time, scans at load 8 came 15 s apart
        and a command wrote far past the quota between them)."""
        if self.du is None:
            return None, 0.0
        started: list[subprocess.Popen[bytes]] = []
        try:
            return await asyncio.to_thread(self._scan, started)
        except asyncio.CancelledError:
            for proc in started:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            raise

    def _scan(self, started: list[subprocess.Popen[bytes]]) -> tuple[int | None, float]:
        assert self.du is not None
        try:
            proc = subprocess.Popen(
                [self.du, "-s", "-k", "-x", "-P", "."],
                cwd=self.workspace,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            return None, 0.0
        started.append(proc)
        timer = threading.Timer(SCAN_TIMEOUT_S, proc.kill)
        timer.start()
        try:
            assert proc.stdout is not None
            out = proc.stdout.read()
            proc.stdout.close()
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0 and not out:
            return None, usage.ru_utime + usage.ru_stime
        return _parse(out), usage.ru_utime + usage.ru_stime

    # --- watching -----------------------------------------------------------------------

    async def start(self, stop: Callable[[], Awaitable[None]]) -> str | None:
        """Start watching; `stop` kills every command and job of the sandbox. Returns a
        notice when the workspace is over its quota already."""
        if self.du is None or self._task is not None:
            return None
        self.used = await self.measure_async()
        notice = None
        if self.used is not None and self.used > self.limit:
            self._floor = self.used
            notice = (
                f"the workspace already holds {_mb(self.used)}, over its disk quota of "
                f"{_mb(self.limit)}: commands are stopped if it grows"
            )
        self._task = asyncio.get_running_loop().create_task(self._watch(stop))
        return notice

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        # Cancelled again until it ends: a cancel that lands as an awaited call returns
        # can be lost, and close() must never wait on a watcher that goes on.
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
        with contextlib.suppress(BaseException):
            task.result()

    async def _watch(self, stop: Callable[[], Awaitable[None]]) -> None:
        while True:
            used, cpu = await self._scan_async()
            if used is not None:
                self.used = used
                if self._over_and_growing(used):
                    self.stops += 1
                    self.last_stop_note = self._stop_note(used)
                    done = self._stop_done = asyncio.Event()
                    try:
                        with contextlib.suppress(Exception):
                            await stop()
                    finally:
                        self._stop_done = None
                        done.set()
                    await self._settle()
            await asyncio.sleep(max(CHECK_INTERVAL_S, SLOW_FACTOR * cpu))

    async def _settle(self) -> None:
        """Measure again once the stop is done: what the stopped commands wrote between
        the scan and their end is where growth is counted from. Counted from the scan
        itself, those last writes (a megabyte or more on a loaded machine) read as new
        growth at the next scan, which then stopped the agent's next command, even the
        `rm` that was getting it back under the quota."""
        used, _ = await self._scan_async()
        if used is None:
            return
        self.used = used
        self._floor = used if used > self.limit else None

    async def clear_to_start(self) -> None:
        """Wait out a stop in progress before a command starts.

        A stop kills the commands it finds one by one and then sweeps whatever is left
        in the sandbox; the stopped command's result comes back as soon as its own
        process dies, before the sweep. The agent's next command (the `rm` that gets it
        back under the quota) started in that gap was swept too, killed with no output."""
        done = self._stop_done
        if done is not None:
            # Bounded: a stop that hangs (a Docker engine that stopped answering) must
            # not hold every later command for ever; past it, the command starts.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), STOP_WAIT_S)

    def _over_and_growing(self, used: int) -> bool:
        if used <= self.limit:
            self._floor = None
            return False
        if self._floor is not None and used <= self._floor + GROWTH_SLACK:
            self._floor = min(self._floor, used)
            return False
        self._floor = used
        return True

    def _stop_note(self, used: int) -> str:
        return (
            f"[mlra stopped this command: the workspace holds {_mb(used)}, over its disk "
            f"quota of {_mb(self.limit)}. Every command and background job of the sandbox "
            "was stopped. Delete files to get back under the quota; while over it, a "
            "command that writes more is stopped again]"
        )

    def note_since(self, stops_before: int) -> str | None:
        """The line for a command that was running when the watcher stopped commands."""
        return self.last_stop_note if self.stops > stops_before else None

    # --- mlra's own writes ----------------------------------------------------------------

    def room(self) -> int:
        """Bytes the workspace may still grow by (0 when over)."""
        if self.used is None:
            self.used = self.measure()
        return max(0, self.limit - (self.used or 0))

    def claim(self, nbytes: int) -> str | None:
        """Count a write of `nbytes` by mlra: why it does not fit, or None (counted)."""
        if self.du is None:
            return None
        room = self.room()
        if nbytes > room:
            return (
                f"not written: {_mb(nbytes)} would take the workspace over its disk quota "
                f"of {_mb(self.limit)} (it holds {_mb(self.used or 0)}); delete files first"
            )
        self.used = (self.used or 0) + nbytes
        return None


def _parse(out: bytes) -> int | None:
    """du's total in bytes from its first field (KiB); it may also have complained
    about entries that vanished while it looked, which does not make the total wrong."""
    first = out.split(maxsplit=1)[:1]
    if not first or not first[0].isdigit():
        return None
    return int(first[0]) * 1024
