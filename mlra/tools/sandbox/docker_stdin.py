"""The host folder a Docker sandbox hands its commands' stdin through.

A folder in the host's /tmp that mlra's own user holds at 0700, with one folder in
it (`in`) that is bind-mounted read-only into the container: the container's user
reads the files through the mount, which never walks the host path, while no other
host user can reach them there. The folder used to be handed to the container's
uid (1000, on many hosts a real person's): that user read each command's input,
swapped it for their own before the command opened it, and could rename the folder
away (theirs, in sticky /tmp) for a link that had root write the next file where
the link led. Files are made and removed through a descriptor of `in` held from the
start, never by a path looked up again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

STDIN_PREFIX = "mlra-stdin-"
"""A Docker sandbox's host folder of its commands' stdin, named so."""
SHOWN = "in"
"""The folder inside it the container sees (as tools/sandbox/docker_exec.py's STDIN_DIR)."""


class StdinFolder:
    """One container's stdin folder: made at its start, removed with it."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=STDIN_PREFIX))  # 0700, mlra's user's
        try:
            os.mkdir(self.root / SHOWN)
            os.chmod(self.root / SHOWN, 0o755)  # the container's user lists and reads it
            self._fd: int | None = os.open(
                self.root / SHOWN, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            )
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    @property
    def shown(self) -> Path:
        """The host path bound into the container."""
        return self.root / SHOWN

    def write(self, name: str, data: bytes) -> None:
        """A new file readable by any uid the container runs as (the host's others
        cannot pass the 0700 folder above it)."""
        if self._fd is None:
            raise OSError("the stdin folder is removed")
        fd = os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=self._fd,
        )
        try:
            with os.fdopen(fd, "wb", closefd=False) as f:
                f.write(data)
            os.fchmod(fd, 0o644)
        finally:
            os.close(fd)

    def forget(self, name: str) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=self._fd)

    def remove(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        shutil.rmtree(self.root, ignore_errors=True)


def stdin_folder_of(source: Path) -> Path | None:
    """The stdin folder to remove for a container's bind mount's source, if it is one:
    the folder above `in`, or (as mlra made them before) the mounted folder itself."""
    if source.name == SHOWN and source.parent.name.startswith(STDIN_PREFIX):
        return source.parent
    if source.name.startswith(STDIN_PREFIX):
        return source
    return None
