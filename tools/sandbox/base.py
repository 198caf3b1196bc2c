"""The sandbox interface every tool and the console's Files pane act through.

A sandbox owns one run's workspace and runs commands in it. Implementations
(local with or without bubblewrap, Docker) differ in isolation only; the tools
never know which one they have. Paths given to a sandbox are as the agent sees
them: relative to the working directory, or absolute inside the sandbox.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

Stream = Literal["stdout", "stderr"]
OutputCallback = Callable[[Stream, str], None]


class SandboxError(Exception):
    """A sandbox operation that cannot be done; its message is shown to the agent."""


@dataclass
class ExecResult:
    exit_code: int | None
    output: str
    """stdout and stderr interleaved in the order they arrived."""
    duration_s: float
    timed_out: bool = False
    killed: bool = False


@dataclass
class FileInfo:
    path: str
    """Relative to the workspace, with '/' separators."""
    is_dir: bool
    size: int
    mtime: float


@dataclass
class SandboxSpec:
    """What the task and flags ask of the sandbox."""

    network: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    hide_paths: list[Path] = field(default_factory=list)
    """Host paths that must not be visible from inside (hidden task files, other runs)."""
    read_only: list[Path] = field(default_factory=list)
    """Host paths to show read-only at their own paths (e.g. under /tmp, which is fresh inside)."""
    read_write: list[Path] = field(default_factory=list)
    """Host paths to show writable at their own paths (the evaluator's dataset cache)."""
    memory_mb: int | None = None
    cpus: float | None = None
    gpus: str | None = None
    pids_limit: int | None = None
    file_size_mb: int | None = None


class LimitsInForce(BaseModel):
    """The resource limits a sandbox actually applies, as recorded in `run_started`."""

    memory_mb: int | None = None
    cpus: float | None = None
    pids: int | None = None
    file_size_mb: int | None = None
    via: str
    """How they are applied: "cgroup v2", "cgroup v1", "rlimit", "docker" or "none"."""
    notes: list[str] = Field(default_factory=list)
    """What is asked for but not enforced, and why."""


class Sandbox(abc.ABC):
    kind: str = "abstract"

    def __init__(self, workspace: Path, spec: SandboxSpec) -> None:
        self.workspace = workspace.resolve()
        self.spec = spec

    @property
    @abc.abstractmethod
    def workdir(self) -> str:
        """The workspace's path as commands inside the sandbox see it."""

    @property
    @abc.abstractmethod
    def isolation(self) -> str:
        """A short word for how commands are confined (bwrap, none, docker)."""

    @property
    def limits(self) -> LimitsInForce:
        """The limits in force once started (none are claimed before)."""
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

    def suspend_commands(self) -> None:
        """Stop running commands where they are (the run is paused); time-outs stop too."""

    def resume_commands(self) -> None:
        """Let suspended commands go on."""

    @abc.abstractmethod
    async def exec(
        self,
        command: list[str],
        *,
        timeout: float,
        on_output: OutputCallback | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run a command, streaming its output; on time-out or cancellation the whole
        process group is killed before this returns or raises."""

    # File access goes through the sandbox so a Docker sandbox can serve it too.
    # Paths are confined to the workspace: anything resolving outside it raises.

    def host_path(self, path: str) -> Path:
        """Map an agent-visible path to the host path inside the workspace."""
        raw = path.strip() or "."
        p = Path(raw)
        if p.is_absolute():
            try:
                p = p.relative_to(self.workdir)
            except ValueError:
                try:
                    p = p.relative_to(self.workspace)
                except ValueError:
                    raise SandboxError(
                        f"path {path!r} is outside the workspace {self.workdir}"
                    ) from None
        resolved = (self.workspace / p).resolve()
        if resolved != self.workspace and self.workspace not in resolved.parents:
            raise SandboxError(f"path {path!r} is outside the workspace {self.workdir}")
        return resolved

    def relative(self, host: Path) -> str:
        rel = host.resolve().relative_to(self.workspace).as_posix()
        return "." if rel == "" else rel

    async def read_file(self, path: str) -> bytes:
        target = self.host_path(path)
        if not target.exists():
            raise SandboxError(f"no such file: {path}")
        if target.is_dir():
            raise SandboxError(f"{path} is a directory")
        return target.read_bytes()

    async def write_file(self, path: str, data: bytes) -> str:
        target = self.host_path(path)
        if target.is_dir():
            raise SandboxError(f"{path} is a directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return self.relative(target)

    async def list_tree(self, path: str = ".", *, max_depth: int = 3) -> list[FileInfo]:
        root = self.host_path(path)
        if not root.exists():
            raise SandboxError(f"no such directory: {path}")
        if not root.is_dir():
            st = root.stat()
            return [FileInfo(self.relative(root), False, st.st_size, st.st_mtime)]
        out: list[FileInfo] = []
        base_depth = len(root.parts)

        def walk(d: Path) -> None:
            try:
                children = sorted(d.iterdir(), key=lambda c: (not c.is_dir(), c.name))
            except OSError:
                return
            for child in children:
                try:
                    st = child.lstat()
                except OSError:
                    continue
                is_dir = child.is_dir() and not child.is_symlink()
                # The link itself, not what it points to: a link may lead out of the workspace.
                rel = child.relative_to(self.workspace).as_posix()
                out.append(FileInfo(rel, is_dir, st.st_size, st.st_mtime))
                if is_dir and len(child.parts) - base_depth < max_depth:
                    walk(child)

        walk(root)
        return out

    async def copy_in(self, host_src: Path, dest: str) -> None:
        import shutil

        target = self.host_path(dest)
        if host_src.is_dir():
            shutil.copytree(host_src, target, dirs_exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(host_src, target)

    async def copy_out(self, src: str, host_dest: Path) -> None:
        import shutil

        source = self.host_path(src)
        if source.is_dir():
            shutil.copytree(source, host_dest, dirs_exist_ok=True)
        else:
            host_dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, host_dest)
