"""Where workspace volumes are mounted here, and whether one is still in use in another
mount namespace.

A killed mlra's Docker container runs on until something removes it (the next Docker
start does, docker_preflight.remove_leftover_containers), with the volume bound at its
/workspace. Carried back to a plain folder meanwhile (volume.settle_stale, which any
sandbox's start runs), the volume would be unmounted here and its image deleted while
the container's command still writes to it: what it writes after the copy is lost with
the image, and the copy may hold a file half written. Such a volume is left for later,
as is one a process in this namespace still works in (a killed mlra's unconfined
grader or command: `held_here`).
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
import time
from pathlib import Path


def loop_device(image: Path) -> str | None:
    """The loop device (`/dev/loop6`) whose backing file is `image`, if one is."""
    try:
        names = os.listdir("/sys/block")
    except OSError:
        return None
    for name in names:
        if not name.startswith("loop"):
            continue
        try:
            backing = Path("/sys/block", name, "loop", "backing_file").read_text().strip()
        except OSError:
            continue
        if Path(backing.removesuffix(" (deleted)")) == image:
            return f"/dev/{name}"
    return None


def used_elsewhere(image: Path, points: list[Path]) -> bool:
    """Whether a process in a mount namespace other than this one (a container) has the
    file system on `image` mounted somewhere other than `points`, where it is mounted
    here: a namespace that only has this one's mounts propagated into it (a dockerd
    started with a mount namespace of its own) does not use it. One process is read for
    each namespace."""
    device = loop_device(image)
    if device is None:
        return False
    try:
        own = os.readlink("/proc/self/ns/mnt")
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return False
    seen = {own}
    for pid in pids:
        try:
            space = os.readlink(f"/proc/{pid}/ns/mnt")
            if space in seen:
                continue
            seen.add(space)
            lines = mountinfo(pid)
        except OSError:
            continue
        for fields in lines:
            after = source_fields(fields)
            if len(after) > 1 and after[1] == device and len(fields) > 4:
                if Path(unescape(fields[4])) not in points:
                    return True
    return False


def held_here(points: list[Path]) -> bool:
    """Whether a process other than this one works in the volume mounted at `points`
    (its current or root folder, its program or an open file there): a killed mlra's
    grader or command run unconfined (`--isolation none`), or a shell left in the
    folder, in this mount namespace, so `used_elsewhere` cannot tell. Carried back
    under it, the volume was detached lazily with the process still in it: what it
    wrote after the copy was lost, and its `evaluator.json` (tasks/evaluators/stale.py)
    was off the path until the copy got to it, so a grading begun then did not find,
    nor end, the grader still running. Read with `readlink`, which procfs answers from
    its own records: a `stat` would ask each file's own file system, and hang on a
    process's file on a hung FUSE or NFS mount."""
    roots = [str(p) for p in points]
    if not roots:
        return False
    me = str(os.getpid())
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit() and p != me]
    except OSError:
        return False

    def inside(link: str) -> bool:
        try:
            target = os.readlink(link)
        except OSError:
            return False
        return any(target == r or target.startswith(r + "/") for r in roots)

    for pid in pids:
        try:
            fds = [f"fd/{n}" for n in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            fds = []  # gone meanwhile, or a zombie: holds nothing
        if any(inside(f"/proc/{pid}/{entry}") for entry in ("cwd", "root", "exe", *fds)):
            return True
    return False


def still_used(image: Path, points: list[Path], *, patient: bool) -> bool:
    """Whether another mount namespace uses the volume, or a process here works in it
    (`held_here`); `patient` (the caller's own workspace): a few looks over two
    seconds, since a sandbox being set up elsewhere holds a copy of every mount for a
    moment, and the caller would otherwise start on top of a volume it could have
    settled."""
    if held_here(points):  # not a moment's copy: no looking again
        return True
    for _ in range(20 if patient else 1):
        if not used_elsewhere(image, points):
            return False
        if patient:
            time.sleep(0.1)
    return True


def mountinfo(pid: str = "self") -> list[list[str]]:
    """A mount namespace's mountinfo, a list of fields per mount; OSError where it cannot
    be read. Read as bytes and decoded as file names are, split on the kernel's own
    separators only: a folder an agent or a grader named with bytes that are not UTF-8
    (which made `read_text` raise, and every later sandbox start with it), or with a
    character `str.split` takes for a line end or white space (U+0085, U+00A0), neither
    fails the read nor moves a field."""
    raw = Path(f"/proc/{pid}/mountinfo").read_bytes()
    return [os.fsdecode(line).split(" ") for line in raw.split(b"\n") if line]


def source_fields(fields: list[str]) -> list[str]:
    """What follows the separator of a mountinfo line: type, source, options."""
    return fields[fields.index("-", 6) + 1 :] if "-" in fields[6:] else []


def unescape(text: str) -> str:
    """mountinfo writes a space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), text)


def loop_mounts() -> dict[Path, list[Path]]:
    """Each loop-backed image mounted on this machine -> where it is mounted."""
    found: dict[Path, list[Path]] = {}
    try:
        lines = mountinfo()
    except OSError:
        return found
    for fields in lines:
        source = source_fields(fields)[1:2]
        if len(fields) < 5:
            continue
        if not source or not source[0].startswith("/dev/loop"):
            continue
        backing = Path("/sys/block", Path(source[0]).name, "loop", "backing_file")
        try:
            text = os.fsdecode(backing.read_bytes()).strip().removesuffix(" (deleted)")
        except OSError:
            continue
        found.setdefault(Path(text), []).append(Path(unescape(fields[4])))
    return found


# --- volumes whose image was deleted under them -------------------------------------------

DELETED = " (deleted)"
LOOP_GET_STATUS64 = 0x4C05
LOOP_INFO64 = struct.Struct("=QQ")
"""The start of `struct loop_info64`: the backing file's device and inode."""
LOOP_INFO64_SIZE = 232


def take_deleted(image: Path, *, wait: bool) -> int | None:
    """The loop device of a volume whose image no path leads to any more (its run folder
    removed by hand while it was mounted), opened and flock'ed, where no living process
    has that image open: its owner holds it open (flock'ed) for as long as it lives, a
    settler while it settles, so none holding it means the owner is gone, whatever its
    pid runs now. The device's lock keeps two settlers apart (the image's cannot be
    taken: nothing can open it by path); closing it, once unmounted, frees the device
    and the image's space. `wait`: another settler holding it is waited for."""
    for name in _loop_names():
        device = f"/dev/{name}"
        if _backing_name(name) != f"{image}{DELETED}":
            continue
        try:
            fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            backing = _backing_file_id(fd)  # the same image still: not a device reused since
            if (
                backing is not None
                and _backing_name(name) == f"{image}{DELETED}"
                and not _held_open(image.name, backing)
            ):
                return fd
        except OSError:
            pass
        os.close(fd)
    return None


def _loop_names() -> list[str]:
    try:
        return [n for n in os.listdir("/sys/block") if n.startswith("loop")]
    except OSError:
        return []


def _backing_name(name: str) -> str | None:
    try:
        return Path("/sys/block", name, "loop", "backing_file").read_text().strip()
    except OSError:
        return None


def _backing_file_id(fd: int) -> tuple[int, int] | None:
    """(device, inode) of the file behind an open loop device (LOOP_GET_STATUS64)."""
    try:
        info = fcntl.ioctl(fd, LOOP_GET_STATUS64, bytes(LOOP_INFO64_SIZE))
    except OSError:
        return None
    dev, ino = LOOP_INFO64.unpack_from(info)
    return os.makedev(os.major(dev), os.minor(dev)), ino


def _held_open(name: str, backing: tuple[int, int]) -> bool:
    """Whether any process has a descriptor on that deleted file (named `name`)."""
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return True  # cannot tell: taken for held
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # gone meanwhile
        for fd in fds:
            path = f"/proc/{pid}/fd/{fd}"
            try:
                target = os.readlink(path)
                if (
                    not target.endswith(DELETED)
                    or os.path.basename(target[: -len(DELETED)]) != name
                ):
                    continue
                st = os.stat(path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == backing:
                return True
    return False
