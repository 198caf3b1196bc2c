"""Where workspace volumes are mounted here, and whether one is still in use in another
mount namespace.

A killed mlra's Docker container runs on until something removes it (the next Docker
start does, docker_preflight.remove_leftover_containers), with the volume bound at its
/workspace. Carried back to a plain folder meanwhile (volume.settle_stale, which any
sandbox's start runs), the volume would be unmounted here and its image deleted while
the container's command still writes to it: what it writes after the copy is lost with
the image, and the copy may hold a file half written. Such a volume is left for later.
"""

from __future__ import annotations

import os
import re
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
            lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            after = line.split(" - ", 1)[1].split() if " - " in line else []
            if len(after) > 1 and after[1] == device and len(fields) > 4:
                if Path(unescape(fields[4])) not in points:
                    return True
    return False


def still_used(image: Path, points: list[Path], *, patient: bool) -> bool:
    """Whether another mount namespace uses the volume; `patient` (the caller's own
    workspace): a few looks over two seconds, since a sandbox being set up elsewhere
    holds a copy of every mount for a moment, and the caller would otherwise start on
    top of a volume it could have settled."""
    for _ in range(20 if patient else 1):
        if not used_elsewhere(image, points):
            return False
        if patient:
            time.sleep(0.1)
    return True


def unescape(text: str) -> str:
    """mountinfo writes a space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), text)


def loop_mounts() -> dict[Path, list[Path]]:
    """Each loop-backed image mounted on this machine -> where it is mounted."""
    found: dict[Path, list[Path]] = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        source = line.split(" - ", 1)[1].split()[1:2]
        if not source or not source[0].startswith("/dev/loop"):
            continue
        backing = Path("/sys/block", Path(source[0]).name, "loop", "backing_file")
        try:
            text = backing.read_text().strip().removesuffix(" (deleted)")
        except OSError:
            continue
        found.setdefault(Path(text), []).append(Path(unescape(fields[4])))
    return found
