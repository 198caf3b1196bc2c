"""A real two-node Ray cluster for tests: a head and a second node, each started by
`ray start` as a cluster user would, on this machine.

The second node runs in a private mount namespace (`unshare -m`) with a tmpfs laid
over the folder that holds the test's task and batch folders, so it sees none of
the driver's files there: it stands for a node that shares no disk with the driver.
The nodes have their own temp dirs and ports (other Rays may run on this machine),
one CPU and a small object store each, no dashboard, and token authentication where
this Ray has it. Every process a node started is stopped by its PID: each `ray
start --block` leads its own session, and the session's members are what is killed.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.mount_namespaces import drop_volumes

RAY = Path(sys.executable).with_name("ray")
HOST = "127.0.0.1"
OBJECT_STORE = 80 * 2**20
START_TIMEOUT = 90.0


@functools.cache
def why_no_cluster() -> str | None:
    """Why this machine cannot run the cluster, or None."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return "ray is not installed (pip install -e '.[batch]')"
    if not RAY.is_file():
        return f"no `ray` command beside {sys.executable}"
    if shutil.which("unshare") is None:
        return "no `unshare` (util-linux) to give the second node a disk of its own"
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "mount", "-t", "tmpfs", "none", "/mnt"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        return (
            "`unshare -m` with a tmpfs mount is not allowed here: "
            + probe.stderr.decode(errors="replace").strip()
        )
    return None


def auth_env() -> dict[str, str]:
    """Token authentication for this cluster and its clients, where this Ray has it."""
    try:
        from ray._private.authentication import authentication_token_setup  # noqa: F401
    except ImportError:
        return {}
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}


_HANDED_OUT: set[int] = set()
"""Ports this process already chose: the kernel may give a just-closed port again, and
Ray refuses two components on one port ("is used by other components")."""


def free_port() -> int:
    """A port nothing listens on now and no earlier call of this process chose."""
    while True:
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def session_members(leader: int) -> list[int]:
    """The live processes of the session `leader` leads (Ray's workers and agents stay in it)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        state, sid = fields[0], int(fields[3])
        if sid == leader and state != "Z":
            found.append(int(proc.name))
    return found


def cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@dataclass
class RayNode:
    name: str
    proc: subprocess.Popen[bytes]
    temp_dir: Path
    output: Path
    known: set[int] = field(default_factory=set)
    """Every PID seen in this node's session, so one that left it is still stopped."""

    def pids(self) -> list[int]:
        members = session_members(self.proc.pid)
        self.known.update(members)
        return members

    def descendants(self) -> list[int]:
        """Every live process under `ray start`, those that left its session included
        (the sandbox starts an agent's commands in sessions of their own)."""
        children: dict[int, list[int]] = {}
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    stat = (proc / "stat").read_text()
                except OSError:
                    continue
                ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
                children.setdefault(ppid, []).append(int(proc.name))
        found, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return [pid for pid in found if _alive(pid)]

    def raylet_pid(self) -> int:
        for pid in self.pids():
            if "/raylet/raylet " in cmdline(pid) or cmdline(pid).startswith("raylet "):
                return pid
        raise AssertionError(f"{self.name}: no raylet among {self.pids()}")

    def stop(self) -> None:
        """SIGTERM to `ray start` (it stops its own processes), then SIGKILL to any left."""
        self.pids()
        for sig, wait in ((signal.SIGTERM, 8.0), (signal.SIGKILL, 5.0)):
            targets = [self.proc.pid] if sig == signal.SIGTERM else self.left()
            for pid in targets:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                self.proc.poll()
                self.pids()
                if not self.left():
                    return
                time.sleep(0.1)
        raise AssertionError(f"{self.name}: processes left running: {self.left()}")

    def left(self) -> list[int]:
        return [pid for pid in self.known | {self.proc.pid} if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@dataclass
class RayCluster:
    """A head and a second node; `address` is what `--ray-address` takes."""

    address: str
    env: dict[str, str]
    """What a client of this cluster needs in its environment (the auth token)."""
    head: RayNode
    nodes: list[RayNode]
    hidden: Path
    """The folder the second node does not see (a tmpfs lies over it there)."""
    _root: Path
    object_store: int = OBJECT_STORE

    def add_node(self, name: str = "nodeB") -> RayNode:
        """A node that does not see `hidden`, holding the custom resource `name` (placement)."""
        extra = ["--address", self.address, "--resources", json.dumps({name: 1})]
        node = _start(
            name, self._root, self.env, extra, hide=self.hidden, object_store=self.object_store
        )
        self.nodes.append(node)
        wait_for_nodes(self, len(self.nodes) + 1)
        return node

    def node_id(self, name: str) -> str:
        """The Ray node id of `head` or of the node started as `name`."""
        key = "node:__internal_head__" if name == "head" else name
        for node in self.alive_nodes():
            if key in node["Resources"]:
                return node["NodeID"]
        raise AssertionError(f"no live node {name}")

    def alive_nodes(self) -> list[dict[str, Any]]:
        code = (
            f"import json, ray; ray.init(address={self.address!r}, log_to_driver=False); "
            "print(json.dumps([n for n in ray.nodes() if n['Alive']], default=str))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return json.loads(out.stdout.strip().splitlines()[-1])


def _ports() -> list[str]:
    names = [
        "--node-manager-port",
        "--object-manager-port",
        "--dashboard-agent-listen-port",
        "--dashboard-agent-grpc-port",
        "--metrics-export-port",
        "--runtime-env-agent-port",
    ]
    args = [a for name in names for a in (name, str(free_port()))]
    return [*args, "--min-worker-port", "0", "--max-worker-port", "0"]


def _start(
    name: str,
    root: Path,
    env: dict[str, str],
    extra: list[str],
    *,
    hide: Path | None = None,
    object_store: int = OBJECT_STORE,
) -> RayNode:
    temp_dir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
    output = root / f"{name}.out"
    scratch = temp_dir / "tmp"
    scratch.mkdir()
    ray_args = [
        str(RAY), "start", "--block", "--num-cpus", "1", "--object-store-memory",
        str(object_store), "--node-ip-address", HOST, "--temp-dir", str(temp_dir),
        "--disable-usage-stats", "--include-log-monitor", "false", *_ports(),
        *extra,
    ]  # fmt: skip
    if hide is not None:
        # The node's own view of the disk: the hidden folder is an empty tmpfs there, and
        # none of this machine's workspace volumes (mount_namespaces.py).
        script = (
            f'{drop_volumes()}; mount -t tmpfs -o size=256m mlra-hidden "$1" && shift && exec "$@"'
        )
        command = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"]
        command += [str(hide), *ray_args]
    else:
        command = ray_args
    with open(output, "wb") as out:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            # A task cache of the node's own, as on a machine of its own (not ~/.cache).
            env={
                **os.environ,
                **env,
                "RAY_USAGE_STATS_ENABLED": "0",
                "MLRA_TASK_CACHE": str(temp_dir / "task-cache"),
                # Its scratch folders too (a run lost with the node leaves its own behind).
                "TMPDIR": str(scratch),
            },
            start_new_session=True,  # its session is how its processes are found and stopped
        )
    return RayNode(name, proc, temp_dir, output)


def wait_for_nodes(cluster: RayCluster, count: int) -> None:
    """Until `count` nodes are alive, read from the cluster itself."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        for node in [cluster.head, *cluster.nodes]:
            if node.proc.poll() is not None:
                raise AssertionError(
                    f"{node.name} exited {node.proc.returncode}: {node.output.read_text()[-3000:]}"
                )
        try:
            if len(cluster.alive_nodes()) >= count:
                return
        except subprocess.SubprocessError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {count} Ray nodes after {START_TIMEOUT:.0f} s")
        time.sleep(0.5)


@contextmanager
def ray_cluster(
    hidden: Path, *, object_store: int = OBJECT_STORE, second_node: bool = True
) -> Iterator[RayCluster]:
    """A head on this machine's disk and (`second_node`) a second node that does not see
    `hidden`."""
    hidden.mkdir(parents=True, exist_ok=True)
    # Short paths: Ray's Unix sockets live under the temp dirs (108 bytes at most).
    root = Path(tempfile.mkdtemp(prefix="mlra-ray-", dir="/tmp"))
    env = auth_env()
    port = free_port()
    head_args = ["--head", "--port", str(port), "--include-dashboard", "false"]
    head_args += ["--dashboard-port", str(free_port())]
    head = _start("head", root, env, head_args, object_store=object_store)
    cluster = RayCluster(f"{HOST}:{port}", env, head, [], hidden, root, object_store)
    try:
        if second_node:
            cluster.add_node("nodeB")
        else:
            wait_for_nodes(cluster, 1)
        yield cluster
    finally:
        errors = []
        for node in [*cluster.nodes, head]:
            try:
                node.stop()
            except AssertionError as exc:
                errors.append(str(exc))
        shutil.rmtree(root, ignore_errors=True)
        if errors:
            raise AssertionError("; ".join(errors))
