"""What a task's evaluator needs from the host besides Python: commands (Lean 3) and
folders (a Lean project with mathlib), found once, the same way for `mlra tasks`
and for grading, and handed to the evaluator's sandbox.

The sandbox shows the system folders and the Python environment; a command
installed elsewhere (elan puts `lean` under ~/.elan) and a folder named by an
environment variable would not be there, and HOME inside is a fresh one, so a
toolchain multiplexer's proxy (`~/.elan/bin/lean`, which reads ~/.elan) could not
pick its toolchain. So each command is resolved on the host to the real binary
(asking elan which toolchain serves the project), the toolchain's folder and each
required folder are shown read-only, and the evaluator reads the binary's path
from `MLRA_COMMAND_<NAME>` and each folder from its own variable.

Settings, from `[evaluator.settings]`:

- `requires_commands`: commands the evaluator runs, e.g. `["lean"]`.
- `requires_folders`: `{VARIABLE = "file it must hold"}`, e.g.
  `{LEAN_PROJECT = "leanpkg.path"}`: the host's `$VARIABLE` must name a folder
  holding that file; the evaluator gets the same variable.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from mlra.tasks.spec import TaskSpec

COMMAND_VAR = "MLRA_COMMAND_{}"
"""The evaluator's variable holding a resolved command's path, e.g. MLRA_COMMAND_LEAN."""

SYSTEM_ROOTS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/etc")


@dataclass
class HostTools:
    env: dict[str, str] = field(default_factory=dict)
    """Variables the evaluator gets: each command's path, each folder's variable."""
    read_only: list[Path] = field(default_factory=list)
    """Folders to show the evaluator's sandbox: toolchains and required folders."""
    problems: list[str] = field(default_factory=list)
    """What is missing, one sentence each; grading cannot work while any is."""


def command_var(name: str) -> str:
    return COMMAND_VAR.format("".join(c if c.isalnum() else "_" for c in name.upper()))


def resolve_command(name: str, *, cwd: Path | None = None) -> Path | None:
    """The real binary `name` runs on this host: through symlinks, and through elan's
    proxy (`elan which NAME`, in `cwd` so the project's toolchain is the one chosen)."""
    found = shutil.which(name)
    if found is None:
        return None
    elan = Path(found).parent / "elan"
    if elan.is_file() and os.access(elan, os.X_OK):
        try:
            proc = subprocess.run(
                [str(elan), "which", name],
                cwd=cwd if cwd is not None and cwd.is_dir() else None,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            proc = None
        if proc is not None and proc.returncode == 0 and proc.stdout.strip():
            return Path(proc.stdout.strip().splitlines()[-1]).resolve()
    return Path(found).resolve()


def toolchain_root(binary: Path) -> Path | None:
    """The folder to show for `binary`: its toolchain (`<root>/bin/lean` beside
    `<root>/lib`), else its own folder; None where the sandbox shows it anyway."""
    if any(binary == Path(r) or Path(r) in binary.parents for r in SYSTEM_ROOTS):
        return None
    parent = binary.parent
    root = parent.parent
    if (
        parent.name == "bin"
        and (root / "lib").is_dir()
        and root != Path.home()
        and root != root.parent
    ):
        return root
    return parent


def host_tools(task: TaskSpec) -> HostTools:
    settings = task.evaluator.settings
    out = HostTools()
    folders = settings.get("requires_folders") or {}
    first_folder: Path | None = None
    for var, must_hold in dict(folders).items():
        value = os.environ.get(str(var))
        if not value:
            out.problems.append(
                f"its evaluator needs ${var}, a folder with {must_hold}; it is not set"
            )
            continue
        folder = Path(value).expanduser().resolve()
        if not (folder / str(must_hold)).exists():
            out.problems.append(
                f"its evaluator needs ${var} to hold {must_hold}; {folder} does not"
            )
            continue
        first_folder = first_folder or folder
        out.env[str(var)] = str(folder)
        out.read_only.append(folder)
    for command in settings.get("requires_commands") or []:
        binary = resolve_command(str(command), cwd=first_folder)
        if binary is None:
            out.problems.append(f"its evaluator needs the `{command}` command; it is not installed")
            continue
        out.env[command_var(str(command))] = str(binary)
        root = toolchain_root(binary)
        if root is not None:
            out.read_only.append(root)
    return out
