"""What a local sandbox's start makes that its close undoes: a uid of its own (its claim
and its view's binds), a network namespace (its holder and slirp4netns), its cgroups.

Each is made in a thread and, where the start is cancelled meanwhile (an attempt stopped
as its sandbox starts), undone before the cancellation goes on (start_step.py): the
thread went on, and what it made after the start gave up was recorded by no sandbox, so
it stayed until mlra exited. Each wait is bounded by the step's own timeouts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from mlra.tools.sandbox import bwrap as bw
from mlra.tools.sandbox import netns, run_uid
from mlra.tools.sandbox.limits import SandboxLimits, TmpfsKind
from mlra.tools.sandbox.start_step import made_or_undone

BECOME_WAIT_S = bw.PROBE_TIMEOUT_S + 10.0
"""The trial command's bound, and the uid's claim and the workspace handed to it."""
NETWORK_WAIT_S = netns.OPEN_BOUND_S + bw.PROBE_TIMEOUT_S
"""The namespace's own waits, and the trial command in it."""
CGROUPS_WAIT_S = 10.0
"""Making cgroups is a few folders and files: nothing of theirs waits."""


async def own_user(
    workspace: Path, gpus: str | None, probe: Callable[[run_uid.UidClaim], str | None]
) -> tuple[run_uid.UidClaim | None, str | None]:
    """As root: claim a uid, hand it the workspace and try bubblewrap as it (run_uid.become);
    where it could not, the second value says why (`root_outside`)."""
    return await made_or_undone(
        lambda: run_uid.become(workspace, bw.gpu_nodes(gpus), probe), _give_back, BECOME_WAIT_S
    )


def _give_back(became: tuple[run_uid.UidClaim | None, str | None]) -> None:
    if became[0] is not None:
        became[0].release()  # its view's binds with it


async def own_network(
    probe: Callable[[netns.OwnNetwork], str | None], strict: bool, as_user: Sequence[str]
) -> netns.NetworkChoice:
    """The network a network task's sandbox gets (netns.network_for_sandbox)."""
    return await made_or_undone(
        lambda: netns.network_for_sandbox(probe, strict, as_user), _close, NETWORK_WAIT_S
    )


def _close(chosen: netns.NetworkChoice) -> None:
    if chosen.network is not None:
        chosen.network.close()


async def cgroups(
    limits: SandboxLimits, *, tmpfs: TmpfsKind, bwrap_version: str, root_outside: bool
) -> None:
    """Make the sandbox's cgroups where they can be had, and record what holds."""
    await made_or_undone(
        lambda: limits.setup(tmpfs=tmpfs, bwrap_version=bwrap_version, root_outside=root_outside),
        lambda _: limits.close(),
        CGROUPS_WAIT_S,
    )
