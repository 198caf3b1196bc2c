"""The host uid a Docker run's container runs as, and what the run is told where it is root.

The container has no user namespace: its processes' uid is the host's. As root, mlra
claims it a uid no account has (run_uid.py), so no host user reaches its processes
through /proc (the workspace's owner or 1000, the image's `agent`, is on many hosts a
person). Where no uid can be claimed (no claims folder mlra's user can write), the
container runs as root outside, as the bubblewrap sandbox does where it cannot start
as one (run_uid.become): still confined, and the run says so once, the same typed
notice whichever sandbox fell back first (agent/loop/root_outside.py). A container
refused for want of a uid would end the run for a setting of the host's, which the
bubblewrap sandbox does not do either.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlra.tools.sandbox import run_uid

FALLBACK_UID = 1000


@dataclass
class ContainerUser:
    uid: int
    gid: int
    claim: run_uid.UidClaim | None = None
    """Held while the container may run as it (let go when it is removed)."""
    root_outside: str | None = None
    """Why no uid of its own could be claimed, so the container runs as root (uid 0)."""


def container_user(workspace: Path, *, claims: bool) -> ContainerUser:
    """The container's user: a claimed uid where `claims` (mlra is root), else the
    workspace's owner, else 1000 (a workspace root owns, with mlra not root)."""
    if claims:
        try:
            held = run_uid.claim()
        except OSError as exc:
            return ContainerUser(0, 0, root_outside=str(exc))
        return ContainerUser(held.uid, held.gid, held)
    st = workspace.stat() if workspace.exists() else None
    if st is not None and st.st_uid != 0:
        return ContainerUser(st.st_uid, st.st_gid)
    return ContainerUser(FALLBACK_UID, FALLBACK_UID)


def docker_root_outside_words(what: str, problem: str) -> str:
    """The run's one `root_outside` notice where the container (`what`) fell back first."""
    return (
        f"no uid of its own could be claimed for {what} ({problem}), so its Docker container "
        "ran as root (uid 0) outside, still confined by Docker (no capabilities, no new "
        "privileges, a read-only root file system): its processes and the files it writes "
        "are root's on the host, and root-only files of the folders it is shown are readable "
        "to it. A claims folder mlra's user can write (/run/mlra-uids, else mlra-uids in the "
        "temporary folder) gives each sandbox a uid of its own"
    )
