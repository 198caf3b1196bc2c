"""What folders hold on the disk: one measure for a run's disk figure (its resource
samples) and for the share of its disk budget an ended attempt takes
(agent/setup/run_budget.py `held_mb`), so that what `mlra runs` and the Resources pane
show is what the budget counts.

- Blocks in use (`st_blocks`), not sizes: a sparse file counts what it really takes.
  A hard link counts once, across all the folders measured together.
- A workspace on a volume (volume.py) counts once, by what is on it: the walk goes
  into the mounted volume, and the image behind it, `fallocate`d to the whole quota,
  is passed over while it is mounted. Counted by its size, each running attempt read
  as its whole quota, its files a second time: a search of three attempts on 50 MB
  read as 3.0 GB against a 2.0 GB budget. An image no longer mounted (one a killed
  mlra left) is counted: it holds that disk.
- A volume mounted at a settling view (volume_settle.py) is passed over: its files
  are being carried back to the workspace's folder, which is counted.
- No other mount is entered (as `du -x`): a grader's cache overlay (its lower layer
  the shared Hugging Face cache) would count the whole cache as the attempt's.
- The budget's measure of what an ended attempt holds (`volumes="held"`) enters no
  mount at all and counts an image by its blocks: an ended attempt has no live volume,
  so an image there (one whose carry-back failed, bound back in place) is disk it holds.
- No link followed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mlra.tools.sandbox.volume_settle import VIEW_PREFIX
from mlra.tools.sandbox.volume_users import loop_mounts

BLOCK = 512
"""The unit of `st_blocks`, whatever the file system's block size."""


@dataclass
class DiskUse:
    bytes: int = 0
    """The blocks the folders hold, in bytes."""
    inodes: int = 0
    """Their files, folders and links (a hard-linked file once)."""


def disk_use(
    roots: list[Path],
    spot: Callable[[str], None] | None = None,
    *,
    volumes: Literal["live", "held"] = "live",
) -> list[DiskUse]:
    """What each of `roots` holds, measured together: a file hard-linked in two counts
    in the first. A root that is not there holds nothing. `spot` is told the path,
    relative to the first root, of each file in it, for a caller that looks for some by
    name as it goes (agent/loop/resources.py: metric files). `volumes`: "live", a
    mounted workspace volume counted by the files on it; "held", no mount entered and
    an image counted by its blocks (above)."""
    images, volume_devices = _mounted_volumes() if volumes == "live" else (set(), set())
    seen: set[tuple[int, int]] = set()
    uses = []
    for index, root in enumerate(roots):
        use = DiskUse()
        uses.append(use)
        told = spot if index == 0 else None
        try:
            st = root.lstat()
        except OSError:
            continue
        if not _count(st, seen, use) or not stat.S_ISDIR(st.st_mode):
            continue
        stack = [(root, st.st_dev)]
        while stack:
            folder, dev = stack.pop()
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if (st.st_dev, st.st_ino) in images:
                            continue
                        is_dir = stat.S_ISDIR(st.st_mode)
                        if (
                            is_dir
                            and st.st_dev != dev
                            and (
                                st.st_dev not in volume_devices
                                or entry.name.startswith(VIEW_PREFIX)
                            )
                        ):
                            continue  # another mount, or a volume being settled
                        if not _count(st, seen, use):
                            continue
                        if is_dir:
                            stack.append((Path(entry.path), st.st_dev))
                        elif told is not None:
                            told(os.path.relpath(entry.path, root))
            except OSError:
                continue
    return uses


def _count(st: os.stat_result, seen: set[tuple[int, int]], use: DiskUse) -> bool:
    """Add `st` to `use`; False where it was counted already (a hard link, a root
    inside another)."""
    key = (st.st_dev, st.st_ino)
    if key in seen:
        return False
    if stat.S_ISDIR(st.st_mode) or st.st_nlink > 1:
        seen.add(key)
    use.bytes += st.st_blocks * BLOCK
    use.inodes += 1
    return True


def _mounted_volumes() -> tuple[set[tuple[int, int]], set[int]]:
    """The files behind this machine's loop mounts, by device and inode (a workspace
    volume's image while its volume is mounted), and the devices of the mounted volumes
    themselves: the only mounts the walk enters."""
    images: set[tuple[int, int]] = set()
    devices: set[int] = set()
    for image, places in loop_mounts().items():
        try:
            st = image.stat()
        except OSError:
            continue
        images.add((st.st_dev, st.st_ino))
        for place in places:
            try:
                devices.add(place.stat().st_dev)
            except OSError:
                continue
    return images, devices
