"""Network attacks from a task with the network on: the host stays out of reach.

Tasks with `network = true` (all seven ML Research Benchmark tasks) used to share the
host's network namespace, so a command reached a TCP service on the host's 127.0.0.1
(a local model server given as `--base-url`, used without being logged or counted
against `--max-cost`; a Ray head, Jupyter, a database) and abstract unix sockets
(X11, D-Bus). Now such a task's commands get a namespace of their own whose way out
is slirp4netns (tools/sandbox/netns.py). Each attack runs against the bubblewrap
sandboxes of tests/tools/test_sandbox_attacks.py (its Scene, as root with the system
and the bundled bwrap, and as `nobody`):

- the host's loopback (directly and through slirp's gateway 10.0.2.2), an abstract
  socket bound on the host, link-local (the metadata address) and the host's own
  addresses: none answers, and the host's servers see no connection;
- the namespace works for what is the task's: its own loopback, a default route and a
  resolver that answers what the host's answers (this machine has no internet, so the
  way out is checked as configured);
- a task without the network still has none;
- without slirp4netns: an LLM agent's run is refused with the install hint, the
  baseline's shares the host's network and says so, as does MLRA_HOST_NETWORK=1;
- a whole run of a network task whose agent probes a server on the host's loopback
  standing in for the model server: no connection, the honest answer scores, and
  `run_started` records what the sandbox got.

Docker is not among them: the test engine (docker/test-engine.sh) runs dockerd with no
bridge and no iptables, so mlra refuses a network task there (test_docker_network.py); the
Docker sandbox gives such a task Docker's bridge (never the host's network: docker_sandbox.py).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.setup.run_setup import sandbox_info
from mlra.console.text.args import UsageError, check_isolation
from mlra.tools.sandbox import netns
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.bwrap import isolation_problem
from mlra.tools.sandbox.local import IsolationUnavailable, LocalSandbox
from tests.scripts import call, turn
from tests.tools import test_sandbox_attacks as attacks
from tests.tools.test_sandbox_attacks import (
    Box,
    InProcessBox,
    NobodyBox,
    Scene,
    _bundled_bwrap,
    _nobody_problem,
    _run,
    _system_bwrap,
    still_honest,
)

scene = attacks.scene
loopback_server = attacks.loopback_server
"""The attack suite's host layout and its server on the host's 127.0.0.1."""

NETWORK_PROBLEM = netns.network_problem()
BWRAP_PROBLEM = isolation_problem()
needs_own_network = pytest.mark.skipif(
    NETWORK_PROBLEM is not None or BWRAP_PROBLEM is not None,
    reason=f"no network namespace of its own here: {NETWORK_PROBLEM or BWRAP_PROBLEM}",
)
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=BWRAP_PROBLEM or "")


def _nobody_network_problem() -> str | None:
    if _nobody_problem() is not None:
        return _nobody_problem()
    if not os.path.exists(netns.TUN) or os.stat(netns.TUN).st_mode & 0o006 != 0o006:
        return f"{netns.TUN} is not open to other users here (slirp4netns needs it)"
    return None


NETWORK_SANDBOXES = [
    pytest.param(
        "bwrap-system",
        marks=pytest.mark.skipif(_system_bwrap() is None, reason="no system bwrap"),
    ),
    pytest.param(
        "bwrap-bundled",
        marks=pytest.mark.skipif(_bundled_bwrap() is None, reason="no bundled bwrap"),
    ),
    pytest.param(
        "bwrap-as-nobody",
        marks=pytest.mark.skipif(
            _nobody_network_problem() is not None, reason=_nobody_network_problem() or ""
        ),
    ),
]
OFFLINE_SANDBOXES = [*NETWORK_SANDBOXES[:2], pytest.param(
    "bwrap-as-nobody",
    marks=pytest.mark.skipif(_nobody_problem() is not None, reason=_nobody_problem() or ""),
)]  # fmt: skip
"""For the task without the network: no slirp4netns, so no /dev/net/tun needed."""

CONNECT = """\
import socket, sys
for family, address in ({targets}):
    s = socket.socket(family)
    s.settimeout(5)
    try:
        s.connect(address)
        s.sendall(b"hello")
        print("CONNECTED", address)
    except OSError as exc:
        print("refused", address, type(exc).__name__, exc.errno)
"""


def _connect(*targets: str) -> str:
    """A command that tries each `(family, address)` and prints what it got."""
    return f"python3 -c {shlex.quote(CONNECT.format(targets=', '.join(targets) + ','))}"


async def _box(kind: str, scene: Scene, network: bool) -> Box:
    spec = SandboxSpec(hide_paths=scene.hide_paths(), network=network)
    if kind == "bwrap-as-nobody":
        made = NobodyBox(scene, str(Path(_system_bwrap() or _bundled_bwrap() or "").parent))
        made.extra = {"network": network}
        return made
    binary = _system_bwrap() if kind == "bwrap-system" else _bundled_bwrap()
    assert binary is not None
    sandbox = LocalSandbox(
        scene.workspace, spec, isolation_mode="bwrap", bwrap_search_path=str(Path(binary).parent)
    )
    await sandbox.start()
    return InProcessBox(kind, sandbox)


@pytest.fixture(params=NETWORK_SANDBOXES)
async def net_box(request: pytest.FixtureRequest, scene: Scene) -> AsyncIterator[Box]:
    """A sandbox of a task with the network on."""
    if NETWORK_PROBLEM is not None:
        pytest.skip(f"no network namespace of its own here: {NETWORK_PROBLEM}")
    made = await _box(request.param, scene, network=True)
    try:
        yield made
    finally:
        await made.close()


def _network_via(box: Box) -> str | None:
    if isinstance(box, NobodyBox):
        assert box.last_answer is not None
        return box.last_answer["network_via"]
    return box.host.network_via


# --- the host, out of reach -------------------------------------------------------------------


async def test_the_hosts_loopback_is_unreachable_from_a_network_task(
    net_box: Box, loopback_server: tuple[int, list[bytes]]
) -> None:
    port, received = loopback_server
    result = await net_box.sh(
        _connect(
            f"(socket.AF_INET, ('127.0.0.1', {port}))", f"(socket.AF_INET, ('10.0.2.2', {port}))"
        )
        + f"; bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED-BASH'; true"
    )
    assert "CONNECTED" not in result.output, result.output
    assert result.output.count("refused (") == 2, result.output
    assert received == []
    assert (_network_via(net_box) or "").startswith("slirp4netns")
    await still_honest(net_box)


@pytest.mark.parametrize("network", [True, False], ids=["network", "no-network"])
@pytest.mark.parametrize("kind", OFFLINE_SANDBOXES)
async def test_an_abstract_socket_on_the_host_is_unreachable(
    scene: Scene, kind: str, network: bool
) -> None:
    if network and NETWORK_PROBLEM is not None:
        pytest.skip(f"no network namespace of its own here: {NETWORK_PROBLEM}")
    if network and kind == "bwrap-as-nobody" and _nobody_network_problem() is not None:
        pytest.skip(_nobody_network_problem() or "")
    name = f"mlra-attack-{scene.token}"
    accepted: list[bool] = []

    async def serve(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(True)
        writer.close()

    server = await asyncio.start_unix_server(serve, path=f"\0{name}")
    box = await _box(kind, scene, network)
    try:
        result = await box.sh(_connect(f'(socket.AF_UNIX, "\\0{name}")') + "; true")
    finally:
        await box.close()
        server.close()
        await server.wait_closed()
    assert "CONNECTED" not in result.output and "refused" in result.output, result.output
    assert accepted == []


@pytest.fixture
async def everywhere_server() -> AsyncIterator[tuple[int, list[bool]]]:
    """A TCP server on all the host's addresses (as a Jupyter or a database may listen)."""
    accepted: list[bool] = []

    async def serve(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(True)
        writer.close()

    server = await asyncio.start_server(serve, "0.0.0.0", 0)
    yield server.sockets[0].getsockname()[1], accepted
    server.close()
    await server.wait_closed()


async def test_link_local_and_the_hosts_own_addresses_are_unreachable(
    net_box: Box, everywhere_server: tuple[int, list[bool]]
) -> None:
    port, accepted = everywhere_server
    targets = [f"(socket.AF_INET, ('{a}', {port}))" for a in netns.host_addresses()]
    targets.append("(socket.AF_INET, ('169.254.169.254', 80))")
    result = await net_box.sh(_connect(*targets) + "; true")
    assert "CONNECTED" not in result.output, result.output
    # Refused by the namespace's routes at once (EHOSTUNREACH), not left to time out.
    assert result.output.count("refused") == len(targets), result.output
    assert "113" in result.output and "timeout" not in result.output.lower(), result.output
    assert accepted == []


# --- what is the task's own -----------------------------------------------------------------


async def test_a_network_task_has_its_own_loopback_a_route_out_and_a_resolver(
    net_box: Box,
) -> None:
    result = await net_box.sh(
        'python3 -c \'import socket; s = socket.create_server(("127.0.0.1", 0)); '
        'c = socket.create_connection(s.getsockname(), timeout=5); print("OWN-LOOPBACK")\';'
        "cat /proc/net/route; cat /etc/resolv.conf"
    )
    assert "OWN-LOOPBACK" in result.output, result.output
    routes = [line.split() for line in result.output.splitlines() if line.startswith("tap0")]
    # The default route (destination 0) through slirp's gateway 10.0.2.2 (little-endian hex).
    assert ["tap0", "00000000", "0202000A"] in [r[:3] for r in routes], result.output
    assert f"nameserver {netns.SLIRP_DNS}" in result.output, result.output
    lookup = await asyncio.create_subprocess_exec(
        "getent", "ahostsv4", "pypi.org", stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    out, _ = await asyncio.wait_for(lookup.communicate(), timeout=20)
    if lookup.returncode == 0:  # the host's resolver answers: so does slirp's 10.0.2.3
        named = await net_box.sh("getent ahostsv4 pypi.org")
        assert named.exit_code == 0 and out.decode().split()[0] in named.output, named.output


@pytest.mark.parametrize("kind", OFFLINE_SANDBOXES)
async def test_a_task_without_the_network_still_has_none(scene: Scene, kind: str) -> None:
    box = await _box(kind, scene, network=False)
    try:
        result = await box.sh("cat /proc/net/route; echo ---; cat /proc/net/dev")
    finally:
        await box.close()
    routes, devices = result.output.split("---")
    assert len(routes.strip().splitlines()) == 1, routes  # the header alone
    names = [line.split(":")[0].strip() for line in devices.splitlines() if ":" in line]
    assert names == ["lo"], devices
    assert _network_via(box) is None


@needs_own_network
async def test_the_network_is_recorded_and_ends_with_the_sandbox(tmp_path: Path) -> None:
    sandbox = LocalSandbox(tmp_path, SandboxSpec(network=True), isolation_mode="bwrap")
    notices = await sandbox.start()
    assert not any("network" in n for n in notices), notices
    info = sandbox_info(sandbox, tmp_path)
    assert info.network and (info.network_via or "").startswith("slirp4netns")
    assert "169.254.0.0/16" in (info.network_via or "")
    own = sandbox._network
    assert own is not None and own._holder is not None and own._slirp is not None
    pids = [own._holder.pid, own._slirp.pid]
    await sandbox.close()
    assert [pid for pid in pids if Path(f"/proc/{pid}").exists()] == []


# --- without slirp4netns ------------------------------------------------------------------


@pytest.fixture
def no_slirp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH with the other programs the namespace needs, but no slirp4netns."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("unshare", "nsenter", "ip"):
        found = netns.find_tools()
        assert not isinstance(found, str)
        os.symlink(getattr(found, name), bin_dir / name)
    monkeypatch.setattr(netns, "TOOLS_PATH", str(bin_dir))
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv(netns.HOST_NETWORK_VAR, raising=False)


@needs_own_network
async def test_without_slirp4netns_an_agents_network_task_is_refused(
    tmp_path: Path, no_slirp: None
) -> None:
    bundled = _bundled_bwrap() or _system_bwrap()
    assert bundled is not None
    sandbox = LocalSandbox(
        tmp_path, SandboxSpec(network=True), require_isolation=True,
        bwrap_search_path=str(Path(bundled).parent),
    )  # fmt: skip
    with pytest.raises(IsolationUnavailable, match="apt-get install slirp4netns"):
        await sandbox.start()
    await sandbox.close()
    with pytest.raises(UsageError, match="slirp4netns is not installed"):
        check_isolation("auto", "openai/test-model", network=True)
    check_isolation("auto", "openai/test-model", network=False)


@needs_own_network
async def test_without_slirp4netns_the_baseline_shares_the_hosts_network_and_says_so(
    tmp_path: Path, no_slirp: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundled = _bundled_bwrap() or _system_bwrap()
    assert bundled is not None
    sandbox = LocalSandbox(
        tmp_path, SandboxSpec(network=True), bwrap_search_path=str(Path(bundled).parent)
    )
    notices = await sandbox.start()
    assert sandbox.network_via == "host"
    assert any("share the host's network" in n and "slirp4netns" in n for n in notices), notices
    await sandbox.close()
    monkeypatch.setenv(netns.HOST_NETWORK_VAR, "1")
    chosen = LocalSandbox(
        tmp_path, SandboxSpec(network=True), require_isolation=True,
        bwrap_search_path=str(Path(bundled).parent),
    )  # fmt: skip
    notices = await chosen.start()
    assert chosen.network_via == "host (MLRA_HOST_NETWORK=1)"
    assert any(n.startswith("MLRA_HOST_NETWORK=1") for n in notices), notices
    check_isolation("auto", "openai/test-model", network=True)  # the user's choice
    await chosen.close()


# --- a whole run ----------------------------------------------------------------------------


@needs_own_network
def test_a_network_tasks_agent_cannot_reach_a_model_server_on_the_hosts_loopback(
    scene: Scene, loopback_server: tuple[int, list[bytes]]
) -> None:
    """The issue's case: a local model server on 127.0.0.1, which the agent could have used
    unlogged and uncounted (a server standing in for it: the run's own scripted server is
    started after the script is written)."""
    port, received = loopback_server
    toml = scene.task / "task.toml"
    toml.write_text(toml.read_text().replace("network = false", "network = true"))
    probe = _connect(f"(socket.AF_INET, ('127.0.0.1', {port}))")
    run = _run(
        scene,
        "local",
        [
            turn("", call("bash", command=f"{probe}; cat question.txt; echo 42 > answer.txt")),
            turn("", call("submit", path="answer.txt")),
        ],
    )
    assert received == []
    assert run.started.sandbox.network and run.started.sandbox.isolation == "bwrap"
    assert (run.started.sandbox.network_via or "").startswith("slirp4netns")
    probed = next(e for e in run.events if isinstance(e, ev.ToolResult) and e.tool == "bash")
    assert "refused" in probed.output and "CONNECTED" not in probed.output, probed.output
    assert run.code == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert run.evaluation.score == 1.0


def test_a_docker_network_task_gets_the_bridge_never_the_hosts_network(tmp_path: Path) -> None:
    """What can be checked without a bridge (the test engine has none): the container's
    settings. A container on the bridge has its own namespace (loopback, abstract sockets)."""
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    for network, mode, via in ((True, "bridge", "docker bridge"), (False, "none", None)):
        sandbox = DockerSandbox(tmp_path, SandboxSpec(network=network), image="mlra:test")
        assert sandbox._container_args()["network_mode"] == mode
        assert sandbox.network_via == via


@needs_own_network
def test_mlra_tasks_says_a_network_task_needs_slirp4netns(no_slirp: None) -> None:
    from mlra.tasks import readiness
    from mlra.tasks.spec import find_task

    problems = readiness.blockers(find_task("babylm"))
    assert any("slirp4netns is not installed" in p for p in problems), problems
    assert not any("slirp4netns" in p for p in readiness.blockers(find_task("tiny-lm")))
