"""A network namespace of its own for a sandbox whose task has the network on.

Sharing the host's network namespace would let a command reach whatever listens on
the host: a model server on 127.0.0.1 (used without being logged or counted against
the cost limit), a Ray head, Jupyter, a database, X11 or D-Bus on their abstract unix
sockets. So a network task's commands join a namespace made for the sandbox, one for
all its commands (a server the agent starts in one command is reachable from the
next, as in a container), whose only way out is slirp4netns: user-mode networking
that makes every outbound connection as an ordinary socket of the host, with
`--disable-host-loopback` so its gateway (10.0.2.2) does not lead to the host's
127.0.0.1. Inside, routes marked unreachable cover link-local addresses
(169.254.0.0/16, the cloud metadata service among them) and each of the host's own
IPv4 addresses, which slirp would otherwise reach as a local connection; the commands
hold no capability over the namespace, so they cannot remove them. IPv6 is not given.
DNS goes to slirp's 10.0.2.3, named in a resolv.conf shown over the host's.

The namespace is held by a `cat` in a user namespace of its own (so that a user who is
not root can make it) reading a pipe only mlra writes to: it ends when the sandbox
closes or when mlra dies, and slirp4netns with it (its exit fd). Commands join it with
`nsenter` before bubblewrap: one exec more per command, not a network set up per command.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import select
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

SLIRP_DNS = "10.0.2.3"
UNREACHABLE_NETS = ("169.254.0.0/16",)
"""Link-local: the cloud metadata service (169.254.169.254) and the host's own link."""

NETWORK_HINT = (
    "network tasks need slirp4netns (apt-get install slirp4netns; it is not on PyPI) and "
    "/dev/net/tun open to the user running mlra; or set MLRA_HOST_NETWORK=1 to let them "
    "share the host's network"
)
TUN = "/dev/net/tun"
HOST_NETWORK_VAR = "MLRA_HOST_NETWORK"
"""Set to 1, a network task's commands share the host's network namespace (its loopback
and abstract sockets included): the user's explicit choice, recorded as such."""

TOOLS_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
OPEN_BOUND_S = 3 * START_TIMEOUT_S + 3 * STOP_TIMEOUT_S
"""The longest `open_network` takes when each of its waits runs out (the holder's start,
the routes, slirp4netns's, then a failed one's stop): where nothing hangs past them."""


class NetworkUnavailable(Exception):
    """The sandbox's own network could not be made; the message says why."""


@dataclass(frozen=True)
class NetworkTools:
    slirp4netns: str
    unshare: str
    nsenter: str
    ip: str


def find_tools(search_path: str | None = None) -> NetworkTools | str:
    """The programs the namespace needs, or a sentence naming those missing."""
    path = search_path if search_path is not None else f"{os.environ.get('PATH', '')}:{TOOLS_PATH}"
    names = ("slirp4netns", "unshare", "nsenter", "ip")
    found = {name: shutil.which(name, path=path) for name in names}
    missing = [name for name, where in found.items() if where is None]
    if missing:
        return f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed"
    return NetworkTools(**{name: str(where) for name, where in found.items()})


def network_problem(search_path: str | None = None) -> str | None:
    """Why a network task could not have its own namespace here (only what is cheap to
    know before a run: the programs), or None."""
    tools = find_tools(search_path)
    if isinstance(tools, str):
        return tools
    if not os.access(TUN, os.R_OK | os.W_OK):
        return f"{TUN} cannot be opened by this user (slirp4netns makes its device there)"
    return None


def host_addresses(fib_trie: str | None = None) -> list[str]:
    """The host's own IPv4 addresses but loopback, from the kernel's routing table.

    /proc/net/fib_trie lists each local address as a leaf followed by "/32 host LOCAL".
    """
    if fib_trie is None:
        try:
            fib_trie = Path("/proc/net/fib_trie").read_text()
        except OSError:
            return []
    found: list[str] = []
    last: str | None = None
    for line in fib_trie.splitlines():
        leaf = re.search(r"\|-- (\d+\.\d+\.\d+\.\d+)$", line.rstrip())
        if leaf:
            last = leaf.group(1)
        elif "/32 host LOCAL" in line and last and not last.startswith("127."):
            if last not in found:
                found.append(last)
    return found


@functools.lru_cache(maxsize=4)
def slirp_version(binary: str) -> str:
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=START_TIMEOUT_S
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    match = re.search(r"version (\S+)", out)
    return match.group(1) if match else ""


def resolv_conf_target() -> str | None:
    """Where the sandbox's resolv.conf goes: the host's path, followed through links
    (systemd-resolved's points into /run, which the sandbox does not show)."""
    if not os.path.lexists("/etc/resolv.conf"):
        return None
    return os.path.realpath("/etc/resolv.conf")


class OwnNetwork:
    """One sandbox's network namespace, its slirp4netns and its resolv.conf."""

    def __init__(self, tools: NetworkTools, as_user: Sequence[str] = ()) -> None:
        self.tools = tools
        self.as_user = list(as_user)
        """Put in front of the namespace's holder: the sandbox's own host uid, where it
        has one (run_uid.py), so the namespace is that uid's and bubblewrap, started
        as it, can join it."""
        self.blocked: list[str] = [*UNREACHABLE_NETS, *(f"{a}/32" for a in host_addresses())]
        self._folder = Path(tempfile.mkdtemp(prefix="mlra-net-"))
        self.resolv_conf = self._folder / "resolv.conf"
        self._holder: subprocess.Popen[bytes] | None = None
        self._slirp: subprocess.Popen[bytes] | None = None
        self._exit_fd: int | None = None

    @property
    def description(self) -> str:
        version = slirp_version(self.tools.slirp4netns)
        return (
            f"slirp4netns{' ' + version if version else ''}: a network namespace of its own; "
            f"no host loopback, unreachable: {', '.join(self.blocked)}"
        )

    def join_prefix(self) -> list[str]:
        """Put in front of bubblewrap: it then starts inside this namespace.

        The holder is this process's child and is reaped only at close, so its pid
        cannot name another process meanwhile; were it gone, nsenter fails the command."""
        assert self._holder is not None
        return [
            self.tools.nsenter, f"--target={self._holder.pid}",
            "--user", "--net", "--preserve-credentials", "--",
        ]  # fmt: skip

    def start(self) -> None:
        """Make the namespace and wait until slirp4netns has configured it."""
        self.resolv_conf.write_text(f"nameserver {SLIRP_DNS}\n")
        self.resolv_conf.chmod(0o644)
        self._folder.chmod(0o755)
        self._holder = subprocess.Popen(
            [*self.as_user, self.tools.unshare, "--user", "--map-root-user", "--net", "--",
             "sh", "-c", "echo ready; exec cat >/dev/null"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, env={"PATH": TOOLS_PATH},
        )  # fmt: skip
        assert self._holder.stdout is not None and self._holder.stderr is not None
        if not _readable(self._holder.stdout.fileno()) or not self._holder.stdout.readline():
            raise NetworkUnavailable(
                f"unshare could not make a namespace: {self._holder_problem()}"
            )
        batch = "link set lo up\n" + "".join(f"route add unreachable {n}\n" for n in self.blocked)
        # As the holder's uid: root in the namespace, so `ip` keeps its capabilities.
        routes = subprocess.run(
            [*self.as_user, *self.join_prefix(), self.tools.ip, "-batch", "-"],
            input=batch.encode(), capture_output=True, timeout=START_TIMEOUT_S, check=False,
        )  # fmt: skip
        if routes.returncode != 0:
            raise NetworkUnavailable(f"ip could not set routes: {_tail(routes.stderr)}")
        self._start_slirp()

    def _start_slirp(self) -> None:
        assert self._holder is not None
        ready_r, ready_w = os.pipe()
        exit_r, self._exit_fd = os.pipe()
        log = self._folder / "slirp4netns.log"
        try:
            with log.open("wb") as out:
                self._slirp = subprocess.Popen(
                    [self.tools.slirp4netns, "--configure", "--mtu=65520",
                     "--disable-host-loopback", "--enable-sandbox", "--enable-seccomp",
                     f"--ready-fd={ready_w}", f"--exit-fd={exit_r}",
                     str(self._holder.pid), "tap0"],
                    pass_fds=(ready_w, exit_r), stdin=subprocess.DEVNULL, stdout=out,
                    stderr=out, start_new_session=True, env={"PATH": TOOLS_PATH},
                )  # fmt: skip
        finally:
            os.close(ready_w)
            os.close(exit_r)
        try:
            ready = _readable(ready_r) and os.read(ready_r, 1) == b"1"
        finally:
            os.close(ready_r)
        if not ready:
            text = log.read_bytes() if log.exists() else b""
            raise NetworkUnavailable(f"slirp4netns did not start: {_tail(text)}")

    def _holder_problem(self) -> str:
        assert self._holder is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._holder.wait(timeout=STOP_TIMEOUT_S)
        assert self._holder.stderr is not None
        return _tail(self._holder.stderr.read() or b"") or f"exit code {self._holder.returncode}"

    def close(self) -> None:
        if self._exit_fd is not None:
            os.close(self._exit_fd)
            self._exit_fd = None
        for proc in (self._slirp, self._holder):
            if proc is None:
                continue
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        self._slirp = self._holder = None
        shutil.rmtree(self._folder, ignore_errors=True)


def open_network(tools: NetworkTools | str, as_user: Sequence[str] = ()) -> OwnNetwork:
    """A started network for one sandbox; NetworkUnavailable says why not."""
    if isinstance(tools, str):
        raise NetworkUnavailable(tools)
    network = OwnNetwork(tools, as_user)
    try:
        network.start()
    except (OSError, subprocess.SubprocessError, NetworkUnavailable) as exc:
        network.close()
        if isinstance(exc, NetworkUnavailable):
            raise
        raise NetworkUnavailable(str(exc)) from None
    return network


@dataclass
class NetworkChoice:
    network: OwnNetwork | None
    """None: the host's network (the user's choice, or no namespace could be had)."""
    via: str
    """What the run records (run_started's sandbox.network_via)."""
    notices: list[str]


def network_for_sandbox(
    probe: Callable[[OwnNetwork], str | None], strict: bool, as_user: Sequence[str] = ()
) -> NetworkChoice:
    """The network a network task's sandbox gets: its own namespace where one can be had.

    Without one, `strict` (an LLM agent, or bubblewrap insisted on) refuses the run with
    NetworkUnavailable; otherwise (the baseline agent's fixed recipe, as a missing
    bubblewrap leaves it unconfined) the host's network is shared and said so. The user's
    MLRA_HOST_NETWORK=1 shares it on purpose. `probe` runs a trial command inside.
    """
    if os.environ.get(HOST_NETWORK_VAR) == "1":
        return NetworkChoice(
            None, f"host ({HOST_NETWORK_VAR}=1)", [f"{HOST_NETWORK_VAR}=1: {_HOST}"]
        )
    network: OwnNetwork | None = None
    try:
        network = open_network(find_tools(), as_user)
        problem = probe(network)
        if problem is not None:
            raise NetworkUnavailable(f"bubblewrap fails in it: {problem}")
    except NetworkUnavailable as exc:
        if network is not None:
            network.close()
        problem = f"the task has the network on, but no network namespace of its own: {exc}"
        if strict:
            raise NetworkUnavailable(f"{problem}; {NETWORK_HINT}") from None
        return NetworkChoice(None, "host", [f"{problem}; {_HOST} ({NETWORK_HINT})"])
    return NetworkChoice(network, network.description, [])


_HOST = (
    "this network task's commands share the host's network: whatever listens on its "
    "loopback or on an abstract socket is reachable"
)


def _readable(fd: int) -> bool:
    ready, _, _ = select.select([fd], [], [], START_TIMEOUT_S)
    return bool(ready)


def _tail(raw: bytes) -> str:
    """The line that says why: the first that is not a warning (slirp4netns repeats
    its seccomp warning in each of its processes)."""
    lines = [line for line in raw.decode(errors="replace").splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith("WARNING")]
    return (said or lines or ["no message"])[0].strip()
