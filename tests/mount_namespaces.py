"""Private mount namespaces for tests' stand-ins: another machine's Ray node, or a
container still holding a killed run's workspace volume.

`unshare -m` copies every mount this machine has at that instant, other tests' workspace
volumes included. A copy keeps its volume's loop device, and a deleted image's space, for
as long as the namespace lives, so a test on another worker that settled that volume saw
its loop device left (CI). Neither stand-in has a reason to hold those copies: a machine
of its own has none, and a holder holds only the volume it was given.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

from mlra.tools.sandbox.volume_users import loop_device


def drop_volumes(keep: Path | None = None) -> str:
    """Shell that lazily unmounts, in the namespace it runs in, every loop-mounted ext4
    (a workspace volume) but the one mounted at `keep`."""
    kept = shlex.quote(str(keep) if keep is not None else "")
    return (
        f"awk -v keep={kept} '/ - ext4 \\/dev\\/loop/ && $5 != keep {{print $5}}'"
        " /proc/self/mountinfo | xargs -r -n1 umount -l 2>/dev/null"
    )


def holder(volume: Path, at: Path) -> list[str]:
    """A process in a namespace of its own with `volume` bound at `at` (as a container
    binds a workspace), saying `ready` once it holds it and nothing else, until killed."""
    script = (
        f"mount --bind {shlex.quote(str(volume))} {shlex.quote(str(at))}"
        f" && {{ {drop_volumes(keep=at)}; echo ready; }} && exec sleep 120"
    )
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script]


def loop_freed(image: Path, within_s: float = 20.0) -> bool:
    """Whether `image`'s loop device is freed once the volume is unmounted. Any mount
    namespace made at the instant of the unmount (another test's bubblewrap sandbox or
    stand-in as it starts) holds a copy until it drops it, and the kernel frees the
    device after the last: waited for, boundedly."""
    deadline = time.monotonic() + within_s
    while loop_device(image) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    return loop_device(image) is None
