"""The run-level cgroup of a Docker run: every container of the run (its own and each
attempt's) is started with `--cgroup-parent` naming it, so the run's memory (no swap),
processes and (with `--cpus`) CPU time are one pool the kernel keeps, as the local
sandbox's run group does (tools/sandbox/run_group.py).

Docker gives one parent path for every hierarchy, so the group sits at the same place
in each: at the top of the tree, where the engine puts its own `/docker` (not beside
mlra's own group, whose path differs from hierarchy to hierarchy on cgroup v1). The
engine makes the containers' groups under it in every hierarchy it mounts (blkio,
cpuset...), which are removed with the group at the run's end, and by the next mlra
that starts a Docker run where this one was killed (after the containers it left).

This holds only where the engine makes its groups in this machine's cgroup tree with
the path as given: a local engine with the cgroupfs driver. A remote engine
(`DOCKER_HOST=tcp://`, `ssh://`), a rootless one, one with the systemd driver (a
parent must be a slice it makes) or one on another machine behind a local socket (a
VM's) is said in `run_started.budget.not_held`, and each container keeps its own share.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
from pathlib import Path
from typing import Any

from mlra.tools.sandbox.limits import CGROUP_ROOT, remove_stale_groups
from mlra.tools.sandbox.run_group import RunGroup


class DockerRunGroup(RunGroup):
    """A run group made at the top of every hierarchy, given to the engine as the
    containers' cgroup parent."""

    def setup(self) -> str:
        from mlra.tools.sandbox.docker_preflight import (
            DockerUnavailable,
            docker_client,
            remove_leftover_containers,
        )

        try:
            client = docker_client()
            elsewhere = engine_elsewhere(client)
            if elsewhere is None:
                # What killed runs left: their containers first, then their groups.
                remove_leftover_containers(client)
        except DockerUnavailable as exc:
            elsewhere = str(exc)
        if elsewhere is not None:
            self.not_held = elsewhere
            return self.via
        for hierarchy in _hierarchies():
            remove_stale_groups(hierarchy)
        via = super().setup()
        if via == "none":
            who = "" if os.geteuid() == 0 else f" (mlra runs as uid {os.geteuid()}, not root)"
            self.not_held = f"no writable cgroup at the top of this machine's cgroup tree{who}"
        return via

    def _parent(self, controller: str) -> Path | None:
        return CGROUP_ROOT / controller

    @property
    def cgroup_parent(self) -> str | None:
        """The containers' `--cgroup-parent`, or None where the run is not held."""
        return f"/{self.name}" if self.held else None

    def holds(self, container_id: str) -> bool:
        """Whether the engine made this container's group under the run's (it did not,
        on a cgroup tree other than this machine's)."""
        parent = self.parents.get("") or self.parents.get("memory")
        return parent is not None and (parent / container_id).is_dir()

    def missed(self, container_id: str) -> None:
        """A container was started outside the run's group: say the run is not held."""
        self.close()
        self.not_held = (
            f"the Docker engine did not make container {container_id[:12]}'s group in this "
            "machine's cgroup tree (an engine in a VM or another container?): each "
            "container keeps its own share"
        )

    def close(self) -> None:
        super().close()
        for hierarchy in _hierarchies():
            group = hierarchy / self.name
            if not group.is_dir():
                continue
            for child in group.iterdir():
                if child.is_dir():
                    with contextlib.suppress(OSError):
                        child.rmdir()
            with contextlib.suppress(OSError):
                group.rmdir()


def _hierarchies() -> list[Path]:
    """The top of each mounted hierarchy (v1: one a controller, named ones included;
    v2: the one tree): where the engine makes a container's group under its parent."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    try:
        found = [p for p in CGROUP_ROOT.iterdir() if not p.is_symlink() and p.is_dir()]
    except OSError:
        return []
    return [p for p in found if (p / "cgroup.procs").exists()]


def engine_elsewhere(client: Any) -> str | None:
    """Why the engine's containers cannot be put under a group mlra makes here (one
    line), or None where they can (checked again on each container: `holds`)."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not host.startswith("unix://"):
        return (
            f"the Docker engine is reached at {host}, not through a socket of this machine: "
            "its containers' groups are not in this machine's cgroup tree"
        )
    try:
        info = client.info()
    except Exception:
        return "the Docker engine would not say how it makes its containers' groups"
    if any("rootless" in str(o) for o in info.get("SecurityOptions") or []):
        return "the Docker engine is rootless: it makes its containers' groups in a tree of its own"
    driver = info.get("CgroupDriver")
    if driver != "cgroupfs":
        return (
            f"the Docker engine's cgroup driver is {driver}: only cgroupfs takes a group mlra "
            "made as its containers' parent"
        )
    ours = "2" if (CGROUP_ROOT / "cgroup.controllers").exists() else "1"
    theirs = str(info.get("CgroupVersion") or "1")
    if theirs != ours:
        return (
            f"the Docker engine uses cgroup v{theirs} and mlra sees v{ours}: the engine is not "
            "on this machine's cgroup tree"
        )
    if _socket_peer(host[len("unix://") :]) == 0:
        return (
            "the Docker engine's socket is served from outside this machine's processes "
            "(a socket passed in from another machine or container)"
        )
    return None


def _socket_peer(path: str) -> int | None:
    """The pid of the process that serves a unix socket, as this pid namespace numbers
    it: 0 for one outside it; None where it cannot be asked."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(path)
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    return struct.unpack("3i", creds)[0]
