"""A run's workspace folder read on the host, for an attached console's Files pane (and
a job's last line): the run's own sandbox is in its own process.

Every path is walked beneath the folder with descriptors, never following a link out of
it (tools/sandbox/beneath.py), whatever the agent left there; reads are bounded.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from mlra.tools.sandbox import beneath, trees
from mlra.tools.sandbox.base import FileInfo

LIST_ENTRIES = 20_000
READ_BYTES = 8 * 1024 * 1024


class HostWorkspace:
    """The run's workspace folder read on the host, for the Files pane: every path walked
    beneath the folder, never following a link out of it (agent/sandbox beneath.py),
    whatever the agent left there."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace

    def _open(self, path: str, flags: int) -> int:
        root = beneath.open_root(self.workspace)
        try:
            fd, _ = beneath.open_beneath(root, beneath.split(path), flags)
        except beneath.Outside:
            raise PermissionError(f"{path} leads out of the workspace") from None
        finally:
            os.close(root)
        return fd

    async def list_tree(self, path: str = ".", *, max_depth: int = 3) -> list[FileInfo]:
        return await asyncio.to_thread(self._list, path, max_depth)

    def _list(self, path: str, max_depth: int) -> list[FileInfo]:
        fd = self._open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            prefix = "" if path in (".", "") else path.rstrip("/") + "/"
            return [
                FileInfo(prefix + e.rel, e.is_dir, e.st.st_size, e.st.st_mtime)
                for e in trees.walk(
                    fd, max_depth=max_depth, max_entries=LIST_ENTRIES + 1, dirs_first=True
                )
            ]
        finally:
            os.close(fd)

    async def read_file(self, path: str) -> bytes:
        return await asyncio.to_thread(self._read, path)

    def _read(self, path: str) -> bytes:
        fd = self._regular(path)
        try:
            return trees.read_bounded(fd, READ_BYTES)
        except trees.TooLarge as exc:
            raise ValueError(f"{path} holds {exc.size:,} bytes: too large to preview") from None
        finally:
            os.close(fd)

    def _regular(self, path: str) -> int:
        fd = self._open(path, os.O_RDONLY | trees.FILE_FLAGS)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ValueError(f"{path} is not a regular file")
        return fd

    def tail(self, path: str, size: int) -> bytes | None:
        """The last `size` bytes of a file, or None where it cannot be read."""
        try:
            fd = self._regular(path)
        except (OSError, ValueError):
            return None
        try:
            end = os.fstat(fd).st_size
            return os.pread(fd, size, max(0, end - size))
        except OSError:
            return None
        finally:
            os.close(fd)
