"""The sandbox interface every tool and the console's Files pane act through.

A sandbox owns one run's workspace and runs commands in it. Implementations
(local with or without bubblewrap, Docker) differ in isolation only; the tools
never know which one they have. Paths given to a sandbox are as the agent sees
them: relative to the working directory, or absolute inside the sandbox.
"""

from __future__ import annotations

import abc
import contextlib
import os
import posixpath
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal

from mlra.tools.sandbox import beneath, trees
from mlra.tools.sandbox.spec import SandboxSpec
from mlra.tools.sandbox.time_out import TimeOut

if TYPE_CHECKING:  # the event models are heavy to import, and the evaluation process,
    # which needs this module's types, never makes one
    from mlra.events import LimitsInForce

Stream = Literal["stdout", "stderr"]
OutputCallback = Callable[[Stream, str], None]


class SandboxError(Exception):
    """A sandbox operation that cannot be done; its message is shown to the agent."""


MAX_READ_BYTES = 8 * 1024 * 1024
"""The most a whole-file read holds in memory (`read_file`, and through it the file
tools and the console's preview): a file the agent made as large as it liked (a sparse
40 GB one costs nothing on disk) must not become that much of mlra's memory."""
MAX_LIST_ENTRIES = 20_000
"""Entries one `list_tree` gathers at most (a folder of a million files is one command)."""


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{size:,} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


class FileTooLarge(SandboxError):
    """A file holds more than a whole-file read takes; nothing of it was kept."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(
            f"{path} is {human_bytes(size)}, more than the {human_bytes(limit)} that can be "
            "read whole"
        )
        self.path = path
        self.size = size
        self.limit = limit


@dataclass
class ExecResult:
    exit_code: int | None
    output: str
    """stdout and stderr interleaved in the order they arrived."""
    duration_s: float
    timed_out: bool = False
    killed: bool = False
    notes: list[str] = field(default_factory=list)
    """What the sandbox itself says of the command (a process killed for memory, commands
    stopped for the disk quota), each also the last lines of `output`."""
    disk_note: str | None = None
    """The sandbox's line saying the workspace was at its disk quota when the command
    ended (also among `notes`); None where it was not."""

    @property
    def disk_full(self) -> bool:
        return self.disk_note is not None


@dataclass
class SandboxUsage:
    """What a sandbox's commands use, where that differs from the host's figures (a
    container has its own CPU share, memory limit and GPUs); read by the Resources pane."""

    cpu_percent: float | None
    """Of one CPU, as `docker stats` and psutil per process count it (200 = two CPUs
    busy); None where it could not be read this time."""
    cpus: float | None
    """How many CPUs the commands may use; None for all of the host's."""
    mem_used_mb: float | None
    mem_limit_mb: float | None
    """None for no limit of the sandbox's own (the host's memory is the limit)."""
    gpu_ids: list[str] | None
    """The host GPUs the commands can use: None for all, [] for none."""


@dataclass
class FileInfo:
    path: str
    """Relative to the workspace, with '/' separators."""
    is_dir: bool
    size: int
    mtime: float


def read_only_mounts(workspace: Path, files: Mapping[str, Path]) -> list[tuple[str, str]]:
    """(the original on the host, its workspace-relative path) of each read-only file
    that can be mounted over the workspace: not where the workspace holds a link or
    the other kind (a folder for a file), which would make every command's mount fail
    (what is graded gets the original back either way: tools/read_only.py)."""
    out = []
    for rel, original in sorted(files.items()):
        if not original.exists():
            continue
        dest = workspace / rel
        if dest.is_symlink() or (dest.exists() and dest.is_dir() != original.is_dir()):
            continue
        out.append((str(original.resolve()), rel))
    return out


class Sandbox(abc.ABC):
    kind: str = "abstract"
    root_outside: str | None = None
    """Once started: why the sandbox has no uid of its own, so its user is root outside it
    (bubblewrap: run_uid.become; a container: docker_user.py); None where it has its own,
    or needs none."""

    def __init__(self, workspace: Path, spec: SandboxSpec) -> None:
        self.workspace = workspace.resolve()
        self.spec = spec

    def root_outside_words(self, what: str) -> str | None:
        """The run's one `root_outside` notice where this sandbox (`what`) fell back first:
        each kind says its own why and remedy."""
        if self.root_outside is None:
            return None
        from mlra.tools.sandbox.run_uid import root_outside_words

        return root_outside_words(what, self.root_outside)

    @property
    @abc.abstractmethod
    def workdir(self) -> str:
        """The workspace's path as commands inside the sandbox see it."""

    @property
    @abc.abstractmethod
    def isolation(self) -> str:
        """A short word for how commands are confined (bwrap, none, docker)."""

    @property
    def isolated_by(self) -> tuple[str, str | None] | None:
        """What confines the commands and its version, once started, for the run's
        record: a sandbox named "bwrap" says little when two bubblewraps of different
        abilities may be on a machine. None: nothing confines them."""
        return None

    @property
    def network_via(self) -> str | None:
        """How a network task's commands reach the network, once started, for the run's
        record (SandboxInfo.network_via); None: no network, or the host's unconfined."""
        return None

    @property
    def limits(self) -> LimitsInForce:
        """The limits in force once started (none are claimed before)."""
        from mlra.events import LimitsInForce

        return LimitsInForce(via="none")

    async def start(self) -> list[str]:
        """Prepare the sandbox; returns notices for the log (e.g. missing isolation)."""
        return []

    async def close(self) -> None:
        """Kill whatever still runs and release resources; safe to call twice."""

    async def stop_processes(self) -> None:
        """Kill every process the sandbox still holds, commands and anything they left.

        Called before a submission is frozen: a process left running (a `setsid`
        daemon, a background job) must not be able to change the artifact after the
        copy that is graded has been taken.
        """

    def usage(self) -> SandboxUsage | None:
        """What the commands use now, if the sandbox can tell it apart from the host's
        (None: the host's own figures are the sandbox's). Cheap, and never raises."""
        return None

    def command_pids(self) -> list[int]:
        """The host pids at the root of each command running now (its process group
        leader): the resource sampler sums their process trees as the run's own use.
        Empty where the sandbox's `usage()` measures its commands itself."""
        return []

    def claim_disk(self, nbytes: int) -> str | None:
        """Count `nbytes` mlra is about to write into the workspace (a file the agent
        asked for, a clone) against its disk quota: why it may not (a line for the agent),
        or None. A sandbox without a quota never refuses."""
        return None

    def disk_room(self) -> int | None:
        """Bytes the workspace may still grow by under its disk quota; None: no quota."""
        return None

    def suspend_commands(self) -> None:
        """Stop running commands where they are (the run is paused); time-outs stop too."""

    def resume_commands(self) -> None:
        """Let suspended commands go on."""

    @abc.abstractmethod
    async def exec(
        self,
        command: list[str],
        *,
        timeout: float | TimeOut,
        on_output: OutputCallback | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run a command, streaming its output; on time-out or cancellation the whole
        process group is killed before this returns or raises."""

    # File access goes through the sandbox so a Docker sandbox can serve it too.
    # Paths are confined to the workspace: anything resolving outside it raises.
    # Files are opened by walking the path from a descriptor of the workspace (see
    # beneath.py), never by name: processes the agent left running may turn a folder
    # into a link to `/root` between any check and any open, and mlra is often root.

    def _inside_path(self, path: str) -> PurePosixPath:
        """The agent's path relative to the workspace, as written (links not looked at)."""
        raw = path.strip() or "."
        p = PurePosixPath(raw)
        if p.is_absolute():
            for base in (self.workdir, str(self.workspace)):
                with contextlib.suppress(ValueError):
                    return p.relative_to(base)
            raise self._outside(path)
        return p

    def _outside(self, path: str) -> SandboxError:
        return SandboxError(f"path {path!r} is outside the workspace {self.workdir}")

    def host_path(self, path: str) -> Path:
        """Map an agent-visible path to the host path inside the workspace.

        For messages and for what runs inside the sandbox only: by the time a host
        path is opened it may lead elsewhere. Open files with `open_beneath`.
        """
        resolved = (self.workspace / self._inside_path(path)).resolve()
        if resolved != self.workspace and self.workspace not in resolved.parents:
            raise self._outside(path)
        return resolved

    def relative(self, host: Path) -> str:
        rel = host.resolve().relative_to(self.workspace).as_posix()
        return "." if rel == "" else rel

    def created(self, fd: int) -> None:
        """A folder or file mlra has just made in the workspace, open as `fd` (a Docker
        sandbox hands it to the container's user)."""

    def open_beneath(
        self,
        path: str,
        flags: int,
        *,
        make_parents: bool = False,
        make_dir: bool = False,
    ) -> tuple[int, str]:
        """Open an agent path inside the workspace; returns the descriptor (the caller
        closes it) and the workspace-relative path, links resolved.

        A link is followed only as far as it stays inside the workspace; one that
        leads out raises the same "outside the workspace" error as `../x` does.
        """
        parts = self._inside_path(path).parts
        root = beneath.open_root(self.workspace)
        try:
            return beneath.open_beneath(
                root,
                parts,
                flags,
                aliases=self._aliases(),
                make_parents=make_parents,
                make_dir=make_dir,
                created=self.created,
            )
        except beneath.Outside:
            raise self._outside(path) from None
        finally:
            os.close(root)

    def _aliases(self) -> tuple[str, ...]:
        """Absolute link targets that mean the workspace: as commands see it, and the host's."""
        return (self.workdir, str(self.workspace))

    def resolve(self, path: str) -> str:
        """The workspace-relative path an agent path names, links inside resolved; a
        missing tail is taken as written. Raises where it leads out of the workspace."""
        parts = list(self._inside_path(path).parts)
        root = beneath.open_root(self.workspace)
        try:
            for cut in range(len(parts), -1, -1):
                try:
                    where = beneath.locate(root, parts[:cut], aliases=self._aliases())
                except (FileNotFoundError, NotADirectoryError):
                    continue
                os.close(where.dir_fd)
                rest = posixpath.normpath("/".join([where.rel, *parts[cut:]]))
                if rest == ".." or rest.startswith("../"):
                    raise beneath.Outside
                return rest
            raise FileNotFoundError(path)  # the workspace itself is gone
        except beneath.Outside:
            raise self._outside(path) from None
        finally:
            os.close(root)

    def exists(self, path: str) -> bool:
        """Whether an agent path names something in the workspace (links inside followed)."""
        try:
            fd, _ = self.open_beneath(path, os.O_PATH)
        except (FileNotFoundError, NotADirectoryError):
            return False
        os.close(fd)
        return True

    def open_regular(self, path: str) -> tuple[int, str, os.stat_result]:
        """A regular file opened for reading beneath the workspace: (descriptor, which the
        caller closes; workspace-relative path; its stat). SandboxError for anything
        else: missing, a folder, a FIFO or device (opened without blocking, never read)."""
        try:
            fd, rel = self.open_beneath(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            raise SandboxError(f"no such file: {path}") from None
        except OSError as exc:
            raise SandboxError(f"cannot open {path}: {exc.strerror or exc}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise SandboxError(f"{path} is {what}")
        return fd, rel, st

    async def read_file(self, path: str, *, max_bytes: int = MAX_READ_BYTES) -> bytes:
        """The whole file; FileTooLarge (a SandboxError) where it holds more than
        `max_bytes`, judged by its size before anything is read and by what is read."""
        fd, _, _ = self.open_regular(path)
        try:
            return trees.read_bounded(fd, max_bytes)
        except trees.TooLarge as exc:
            raise FileTooLarge(path, exc.size, max_bytes) from None
        finally:
            os.close(fd)

    async def read_head(self, path: str, max_bytes: int) -> tuple[bytes, int]:
        """(at most the first `max_bytes` of the file, its size)."""
        fd, _, st = self.open_regular(path)
        try:
            return trees.read_head(fd, max_bytes), st.st_size
        finally:
            os.close(fd)

    def read_only_problem(self, rel: str) -> str | None:
        """Why the workspace path `rel` may not be written (a task's read-only file, or
        one inside a read-only folder), or None."""
        for protected in self.spec.read_only_files:
            if rel == protected or rel.startswith(protected + "/"):
                return (
                    f"{rel} is read-only: the task lets you read {protected} but not change "
                    "it (copy it to another path to make a changed version)"
                )
        return None

    async def write_file(self, path: str, data: bytes) -> str:
        if self.spec.read_only_files:
            try:
                problem = self.read_only_problem(self.resolve(path))
            except FileNotFoundError:
                problem = None
            if problem is not None:
                raise SandboxError(problem)
        refused = self.claim_disk(len(data))
        if refused is not None:
            raise SandboxError(refused)
        try:
            fd, rel = self.open_beneath(
                path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, make_parents=True
            )
        except IsADirectoryError:
            raise SandboxError(f"{path} is a directory") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise SandboxError(f"{path} is not a regular file")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return rel

    async def list_tree(
        self, path: str = ".", *, max_depth: int = 3, max_entries: int = MAX_LIST_ENTRIES
    ) -> list[FileInfo]:
        """The folder's entries down to `max_depth` levels, each folder's entries after
        it, folders first; links listed as themselves, never followed. At most
        `max_entries` + 1 entries: one more than asked says there are more."""
        try:
            fd, rel = self.open_beneath(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            raise SandboxError(f"no such directory: {path}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISDIR(st.st_mode):
                return [FileInfo(rel, False, st.st_size, st.st_mtime)]
            prefix = "" if rel == "." else rel + "/"
            return [
                FileInfo(prefix + e.rel, e.is_dir, e.st.st_size, e.st.st_mtime)
                for e in trees.walk(
                    fd, max_depth=max_depth, max_entries=max_entries + 1, dirs_first=True
                )
            ]
        finally:
            os.close(fd)
