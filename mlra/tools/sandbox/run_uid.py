"""A host uid of its own for each sandbox when mlra runs as root.

A user namespace maps the sandbox's uid to the uid that made it. Started by root,
bubblewrap's uid 1000 is host root outside: the kernel's per-user counts that no
cgroup holds (inotify instances, `fs.inotify.max_user_instances`) are root's, so a
command that takes them all leaves every root process on the host failing
`inotify_init`; the files it writes are root's; root-only files in the folders it is
shown are readable by their owner bits. A Docker container run as uid 1000 with no
user namespace is uid 1000 on the host, and a host user who has that uid reaches its
processes through /proc (their stdin, environment, ptrace).

So each sandbox gets a uid (and the same gid) that no account has: outside
/etc/passwd and /etc/group as NSS answers them, outside the subordinate ranges of
/etc/subuid and /etc/subgid (rootless containers, Docker's userns-remap), held by no
live process, and claimed by an exclusive `flock` on a file named after it in
/run/mlra-uids. The lock is the claim: it dies with the process that holds it, so
a killed mlra's uids are free again at once (a process of the killed run still
alive under that uid, a container, keeps it taken by the /proc scan), and two
sandboxes started at the same moment, in one process or in many, never share one.

Bubblewrap is started as that uid (`setpriv`, else a few lines of Python doing the
same) with no groups and no capabilities, so it makes its user namespace as an
ordinary user; what it shows but could not reach by path is bound for it on a
stand-in only it can enter (`View`).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import grp
import os
import pwd
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mlra.tools.sandbox import trees, volume_users

FIRST_UID = 1_879_048_192
"""0x70000000: far above any account, subordinate range or Docker remap this machine
hands out in practice, and below 2**31, which some tools read as a signed number."""
UID_COUNT = 16_777_216
CLAIMS_DIRS = (Path("/run/mlra-uids"), Path(tempfile.gettempdir()) / "mlra-uids")
"""Where claims are made: /run (cleared at boot, root's), else the temporary folder."""
TRIES = 64
TOOLS_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"

_SWITCH_PY = (
    "import os, sys; u = int(sys.argv[1]); os.setgroups([int(g) for g in sys.argv[2].split(',') "
    "if g]); os.setresgid(u, u, u); os.setresuid(u, u, u); os.execv(sys.argv[3], sys.argv[3:])"
)


@dataclass
class UidClaim:
    """A uid claimed for one sandbox until `release`."""

    uid: int
    path: Path
    fd: int | None

    def __post_init__(self) -> None:
        self.view = View(self)
        self.groups: list[int] = []
        """Supplementary groups it keeps: those the GPUs' device nodes need (device_groups)."""

    def prefix(self) -> list[str]:
        return switch_prefix(self.uid, self.groups)

    def hand(self, fd: int) -> None:
        """Give it a file or folder mlra has just made (open as `fd`)."""
        with contextlib.suppress(OSError):
            os.fchown(fd, self.uid, self.gid)

    @property
    def gid(self) -> int:
        return self.uid

    def release(self) -> None:
        if self.fd is None:
            return
        self.view.close()
        # Unlinked while still locked: one that opened it meanwhile finds, once it has
        # the lock, that the name no longer leads to its file, and tries another uid.
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self.fd)
        self.fd = None


def wanted() -> bool:
    """Whether sandboxes get a uid of their own: only root can start a process as one."""
    return os.geteuid() == 0


def claim() -> UidClaim:
    """A uid no account has and no other live sandbox or process holds; OSError where
    none can be claimed (no writable claims folder)."""
    folder = _claims_dir()
    _sweep(folder)
    taken = _live_uids() | _subordinate_ids()
    for _ in range(TRIES):
        uid = FIRST_UID + secrets.randbelow(UID_COUNT)
        if uid in taken or _has_account(uid):
            continue
        held = _lock(folder / str(uid), uid)
        if held is not None:
            return held
    raise OSError("no unused uid could be claimed")


def _claims_dir() -> Path:
    problem: OSError | None = None
    for folder in CLAIMS_DIRS:
        try:
            folder.mkdir(mode=0o711, exist_ok=True)
            st = folder.lstat()
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                raise OSError(f"{folder} is not a folder of mlra's user")
            folder.chmod(0o711)  # entered by the sandboxes' uids (View), listed by none
            return folder
        except OSError as exc:
            problem = exc
    raise problem or OSError("no folder for uid claims")


def _lock(path: Path, uid: int) -> UidClaim | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(path, follow_symlinks=False).st_ino:
            raise OSError("released meanwhile")
    except OSError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return UidClaim(uid, path, fd)


def sweep() -> None:
    """Undo what sandboxes of mlra processes that are gone left: their claims and the
    binds of their views (one of a workspace volume would keep it mounted)."""
    with contextlib.suppress(OSError):
        _sweep(_claims_dir())


def _sweep(folder: Path) -> None:
    """Remove the claims (and views) of processes that are gone: a killed mlra's."""
    try:
        names = [n for n in os.listdir(folder) if n.isdigit()]
    except OSError:
        return
    for name in names:
        held = _lock(folder / name, int(name))
        if held is not None:
            _unbind_view(folder / f"{name}.view")
            held.release()
    with contextlib.suppress(OSError):
        for entry in os.listdir(folder):
            uid = entry.removesuffix(".view")
            if uid != entry and uid.isdigit() and not (folder / uid).exists():
                held = _lock(folder / uid, int(uid))  # not one claimed since
                if held is not None:
                    _unbind_view(folder / entry)  # its claim given back, its binds not
                    held.release()


def _has_account(uid: int) -> bool:
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except KeyError:
            pass
        except OSError:
            return True  # NSS could not say: take it as used
    return False


def _live_uids() -> set[int]:
    """The real and effective uids and gids of every process on the host (a killed
    run's container, a daemon that left a sandbox), read from /proc."""
    found: set[int] = set()
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return found
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status", "rb") as status:
                for line in status:
                    if line.startswith((b"Uid:", b"Gid:")):
                        found.update(int(v) for v in line.split()[1:])
        except (OSError, ValueError):
            continue
    return found


def _subordinate_ids() -> set[int]:
    """Every uid and gid /etc/subuid and /etc/subgid hand out that falls in our range."""
    found: set[int] = set()
    for name in ("/etc/subuid", "/etc/subgid"):
        try:
            lines = Path(name).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            parts = line.strip().split(":")
            if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
                continue
            start, count = int(parts[1]), int(parts[2])
            low, high = max(start, FIRST_UID), min(start + count, FIRST_UID + UID_COUNT)
            found.update(range(low, high) if high - low < 1_000_000 else ())
            if high - low >= 1_000_000:
                raise OSError(f"{name} hands out most of mlra's uid range")
    return found


def switch_prefix(uid: int, groups: Sequence[int] = ()) -> list[str]:
    """Put in front of a command (run as root) to run it as `uid`:`uid` with no
    capabilities and no supplementary groups but `groups`."""
    setpriv = shutil.which("setpriv", path=TOOLS_PATH)
    listed = ",".join(str(g) for g in groups)
    if setpriv is not None:
        keep = f"--groups={listed}" if groups else "--clear-groups"
        return [setpriv, f"--reuid={uid}", f"--regid={uid}", keep, "--"]
    return [sys.executable, "-I", "-S", "-c", _SWITCH_PY, str(uid), listed]


def device_groups(nodes: Sequence[str]) -> list[int]:
    """The groups that open device nodes others may not (a host that gives its GPUs'
    nodes to a `video` group, 0660): kept by the sandbox's uid so its GPUs still work.
    Never root's group."""
    found: list[int] = []
    for node in nodes:
        try:
            st = os.stat(node)
        except OSError:
            continue
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o006 != 0o006 and mode & 0o060 == 0o060 and st.st_gid not in (0, *found):
            found.append(st.st_gid)
    return found


BIND_FLAGS = ("--bind", "--ro-bind")


class View:
    """Where bubblewrap, started as the sandbox's uid, finds what it is to show.

    It mounts by path, as that uid: a folder on the way that others may not enter (the
    run folder, 0700; /root, where a pyenv Python or the venv with the bundled
    bubblewrap may live) stops it. Each such source is bound (as root, once, private)
    on a stand-in in a folder of the sandbox's uid only (/run/mlra-uids/UID.view, 0700),
    and bubblewrap is given the stand-in. No other user can enter that folder, so the
    run folder's 0700 keeps them out as before. Sources every user can reach are left as
    they are. The binds are undone at close, a killed mlra's by the next claim (`_sweep`).
    """

    def __init__(self, claim: UidClaim) -> None:
        self.folder = claim.path.with_name(f"{claim.uid}.view")
        self.uid = claim.uid
        self.points: dict[str, str] = {}
        self._claim = claim

    def stage(self, argv: Sequence[str]) -> None:
        """Bind every source of `argv` others cannot reach (and the bubblewrap binary,
        where it is out of reach) on a stand-in; OSError where one cannot be."""
        wanted = [src for src in _sources(argv) if src not in self.points and not _reachable(src)]
        if not _reachable(argv[0], executable=True) and argv[0] not in self.points:
            wanted.append(argv[0])
        if not wanted:
            return
        if self._claim.fd is None:
            # A start abandoned (cancelled) while its thread went on: binds made now
            # would outlive the claim, which is what the sweep finds views by.
            raise OSError("the sandbox's uid was given back before its view was made")
        if not self.points:
            _unbind_view(self.folder)  # a killed mlra's with this uid
            self.folder.mkdir(mode=0o700, exist_ok=True)
            os.chown(self.folder, self.uid, self.uid)
        for src in wanted:
            point = self.folder / str(len(self.points))
            if os.path.isdir(src):
                point.mkdir(mode=0o700)
            else:
                point.touch(mode=0o600)
            _mount(src, str(point), MS_BIND | MS_REC)
            self.points[src] = str(point)
            _mount("none", str(point), MS_PRIVATE | MS_REC)  # no mount propagates in or out

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """Bubblewrap's `argv` with the stand-ins in place of their sources."""
        out = list(argv)
        for i in [0, *_source_indexes(out)]:
            out[i] = self.points.get(out[i], out[i])
        return out

    def close(self) -> None:
        """Its binds undone and its folder removed: one whose first bind was refused too
        (its folder and stand-in made, nothing bound)."""
        _unbind_view(self.folder)
        self.points.clear()


MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2


def _mount(source: str, target: str, flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source.encode(), target.encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"could not bind {source} for the sandbox: {os.strerror(err)}")


def _unbind_view(folder: Path) -> None:
    """Undo a view's binds and remove its stand-ins: never recursively (a stand-in still
    bound is a workspace), each unmounted first and then removed only if empty."""
    if not folder.is_dir() or folder.is_symlink():
        return
    libc = ctypes.CDLL(None, use_errno=True)
    prefix = f"{folder}/"
    for point in _mount_points():
        if point.startswith(prefix):
            libc.umount2(point.encode(), MNT_DETACH)
    for entry in os.scandir(folder):
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
    with contextlib.suppress(OSError):
        folder.rmdir()


def _mount_points() -> list[str]:
    """Where things are mounted here, deepest first (from /proc/self/mountinfo)."""
    try:
        lines = volume_users.mountinfo()
    except OSError:
        return []
    found = [volume_users.unescape(fields[4]) for fields in lines if len(fields) > 4]
    return sorted(found, key=len, reverse=True)


def _source_indexes(argv: Sequence[str]) -> list[int]:
    """Where the bind sources are in bubblewrap's `argv` (before its command)."""
    end = argv.index("--") if "--" in argv else len(argv)
    found: list[int] = []
    i = 1
    while i < end:
        if argv[i] in BIND_FLAGS and i + 2 < end:
            found.append(i + 1)
            i += 3  # no value of another option is a bind flag
        else:
            i += 1
    return found


def _sources(argv: Sequence[str]) -> list[str]:
    return [argv[i] for i in _source_indexes(argv)]


def _reachable(path: str, *, executable: bool = False) -> bool:
    """Whether any user (no groups, by the `other` bits) can reach `path` by name."""
    try:
        real = Path(path).resolve(strict=True)
        for folder in [*reversed(real.parents)]:
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                return False
        return not executable or bool(os.stat(real).st_mode & stat.S_IXOTH)
    except OSError:
        return True  # bubblewrap says what is wrong with it


def become(
    workspace: Path, gpu_nodes: Sequence[str], probe: Callable[[UidClaim], str | None]
) -> tuple[UidClaim | None, str | None]:
    """A sandbox's own user: claim a uid, hand it the workspace and try bubblewrap as it
    (`probe`: a trial command as that user, None where it ran). Where it cannot start so, the
    claim is given back, the workspace is root's again and the sandbox's user is root
    outside: the second value says why (for the run's `root_outside` notice). Anything
    else `probe` raises (its view's binds refused: the start fails, not the host's setting)
    gives the claim and the workspace back too: raised out of a sandbox's start before it
    held the claim, nothing else would, and the claim stayed until mlra exited."""
    user: UidClaim | None = None
    try:
        user = claim()
        user.groups = device_groups(gpu_nodes)
        if workspace.is_dir():
            hand_tree(workspace, user.uid, user.gid)
        problem = probe(user)
    except OSError as exc:
        problem = str(exc)
    except BaseException:
        _given_back(user, workspace)
        raise
    if problem is None:
        return user, None
    _given_back(user, workspace)
    return None, problem


def _given_back(user: UidClaim | None, workspace: Path) -> None:
    """The claim let go (its view's binds with it) and the workspace root's again."""
    if user is not None:
        user.release()
    if workspace.is_dir():
        hand_tree(workspace, 0, 0)


def root_outside_words(what: str, problem: str) -> str:
    """The one notice a run gets where a sandbox of it (`what` fell back first) could
    not start as a uid of its own: the host's setting, so the others fall back too."""
    return (
        f"bubblewrap could not start as a uid of its own here ({problem}), so {what} ran as "
        "root outside it, still confined by bubblewrap; so do the agent's sandbox, the "
        "grader's and each fetch step (a clone, an arXiv read) on this host: their inotify "
        "instances and files are root's, and root-only files of the folders they are shown "
        "are readable to them. Allow unprivileged user namespaces (on Ubuntu 24.04, "
        "AppArmor's kernel.apparmor_restrict_unprivileged_userns) to give each its own uid"
    )


def hand_tree(root: Path, uid: int, gid: int) -> None:
    """Give `root` and everything in it to `uid`, walked by folder descriptors and each
    entry changed relative to its folder without following links: a daemon's folder
    flipped into a link to `/` must not get host files chowned (trees.walk does not
    enter a folder that became a link, and does not recurse)."""
    fd = os.open(root, trees.DIR_FLAGS)
    try:
        for entry in trees.walk(fd):
            with contextlib.suppress(OSError):
                os.chown(entry.name, uid, gid, dir_fd=entry.dir_fd, follow_symlinks=False)
        os.fchown(fd, uid, gid)
    finally:
        os.close(fd)
