"""Shared fixtures: offline Hugging Face settings, the test task, a CLI runner, a baseline run."""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

# Bytecode is cached, whatever the environment says: where PYTHONDONTWRITEBYTECODE is
# set (this project's development containers set it), every worker and every `mlra`
# process a test starts compiled the whole package and pytest rewrote every test module
# afresh, a fifth of the suite's CPU on two cores. Set before mlra is first imported, and
# passed on to the processes the tests start.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

from mlra.agent.loop.clock import RunClock  # noqa: E402
from mlra.tools.sandbox.base import Stream  # noqa: E402
from tests.zygote import Zygote  # noqa: E402

if TYPE_CHECKING:
    from mlra import events as ev
    from mlra.agent.run.controller import RunController

# Nothing may reach the Hugging Face Hub: this machine has no network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Each run's default disk quota is a volume of half the free space, reserved when it is
# made: four workers' runs side by side would leave a fifth nothing beyond the reserve
# (a run refused at random). The suite's runs write megabytes; each default takes 4 GB
# at most (tools/sandbox/default_limits.py).
os.environ.setdefault("MLRA_DISK_CAP_GB", "4")

TESTS = Path(__file__).resolve().parent
ANSWER_TASK = TESTS / "data" / "tasks" / "answer"
ANSWER_RECIPE = 'command = "python -c \\"print(6 * 7)\\" > answer.txt"'
"""The answer task's recipe step's command line in its task.toml, for a copy to change."""
SECRET_ENV = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "MLRA_MODEL")


# The xdist units and their order (tests/xdist_units.py): hooks found here by name.
from tests.xdist_units import pytest_collection_modifyitems, pytest_xdist_make_scheduler  # noqa: E402, F401


@pytest.fixture(scope="session", autouse=True)
def _terminal_sigint() -> None:
    """Ctrl-C for the processes the tests start as from a terminal, however pytest was
    started. A shell's background job (`.ci/run &`, `nohup`) starts pytest and so its
    xdist workers with SIGINT ignored, which Python keeps, and every child a test starts
    inherits it: a test that stopped a batch or a Ray driver with SIGINT waited for a
    process that never saw it. Taken back where the tests run (a worker; pytest itself
    with `-n 0`), before any test starts a process."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _sigint_state() -> tuple[object, bool]:
    """SIGINT's handler here and whether this thread blocks it."""
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    return signal.getsignal(signal.SIGINT), blocked


@pytest.fixture(autouse=True)
def _sigint_kept() -> Iterator[None]:
    """A test leaves Ctrl-C as it found it: one that left SIGINT ignored or blocked
    would pass that on to every process the worker's later tests start (two calls a
    test; no test of the suite did, when this was added)."""
    before = _sigint_state()
    yield
    after = _sigint_state()
    assert after == before, f"the test left SIGINT (handler, blocked) {after}, not {before}"


@pytest.fixture
def answer_task() -> Path:
    return ANSWER_TASK


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Mapping[str, str]:
    """The process environment without any model keys or defaults."""
    for name in SECRET_ENV:
        monkeypatch.delenv(name, raising=False)
    return os.environ


_ZYGOTE = Zygote()
atexit.register(_ZYGOTE.close)


def mlra_cli(
    args: list[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    inherit: Callable[[str], bool] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the real `mlra` command line in a child process: forked from a pre-imported
    one (tests/zygote.py) unless MLRA_TEST_SUBPROCESS=1 asks for a fresh interpreter.
    Its environment is this process's, less the model keys (or less what `inherit`
    refuses), with `env` over it."""
    keep = inherit or (lambda name: name not in SECRET_ENV)
    base = {k: v for k, v in os.environ.items() if keep(k)}
    base.update(env or {})
    if os.environ.get("MLRA_TEST_SUBPROCESS") != "1":
        with tempfile.TemporaryDirectory(prefix="mlra-cli-") as out_dir:
            done = _ZYGOTE.run(args, cwd=cwd, env=base, timeout=timeout, out_dir=Path(out_dir))
        if done is not None:
            return done
    return subprocess.run(
        [sys.executable, "-m", "mlra", *args],
        cwd=cwd,
        env=base,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def offline_env() -> dict[str, str]:
    """The environment a task's recipe runs in here: offline, and `python` in a recipe
    step is this interpreter, as it is in the sandbox."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def answer_copy(
    folder: Path,
    *edits: tuple[str, str],
    append: str = "",
    files: Mapping[str, str] | None = None,
    source: Path = ANSWER_TASK,
) -> Path:
    """A copy of the answer task at `folder`, with each `(old, new)` text of its task.toml
    replaced in turn (an old text not there fails the test, which would otherwise run
    the plain task), `append` added at its end, and each of `files` (a path in the task,
    such as `hidden/check.py`: its text) written."""
    shutil.copytree(source, folder)
    toml = (folder / "task.toml").read_text(encoding="utf-8")
    for old, new in edits:
        assert old in toml, f"not in the answer task's task.toml: {old}"
        toml = toml.replace(old, new)
    (folder / "task.toml").write_text(toml + append, encoding="utf-8")
    for name, text in (files or {}).items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def answer_task_as(answer_task: Path, tmp_path: Path, name: str, *edits: tuple[str, str]) -> Path:
    """`answer_copy` in tmp_path/`name`, the task named `name`."""
    renamed = ('name = "answer"', f'name = "{name}"')
    return answer_copy(tmp_path / name, renamed, *edits, source=answer_task)


def bare_venv(venv: Path) -> tuple[Path, Path]:
    """A new virtual environment at `venv`, without pip (a test installs or borrows what
    it needs, offline): its python and its site-packages folder, where a `.pth` line
    reaches packages outside it."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return python, Path(purelib)


class BaselineRun(NamedTuple):
    proc: subprocess.CompletedProcess[str]
    run_dir: Path


def run_baseline(
    task: str | Path,
    root: Path,
    *extra: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> BaselineRun:
    """`mlra run TASK --model baseline --no-tui --runs-dir ROOT/runs EXTRA...` from ROOT,
    which must succeed: the process and the one run folder it made (beside any made there
    before)."""
    runs = root / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    proc = mlra_cli(
        ["run", str(task), "--model", "baseline", "--no-tui", "--runs-dir", str(runs), *extra],
        cwd=root,
        env=env,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = set(runs.iterdir()) - before
    return BaselineRun(proc, run_dir)


@pytest.fixture
def answer_baseline_run(answer_task: Path, tmp_path: Path) -> BaselineRun:
    """The baseline agent's finished run of the test task, in `tmp_path/runs`."""
    return run_baseline(answer_task, tmp_path)


class Chunks:
    """Collects streamed output and lets a test await a piece of it."""

    def __init__(self) -> None:
        self.items: list[tuple[Stream, str]] = []
        self._changed = asyncio.Event()

    def __call__(self, stream: Stream, text: str) -> None:
        self.items.append((stream, text))
        self._changed.set()

    def text(self, stream: Stream | None = None) -> str:
        return "".join(t for s, t in self.items if stream is None or s == stream)

    async def wait_for(self, needle: str, stream: Stream | None = None) -> None:
        async with asyncio.timeout(20):
            while needle not in self.text(stream):
                self._changed.clear()
                await self._changed.wait()


def deadline_inside_the_held_call(controller: RunController, left_s: float = 6.0) -> None:
    """Let the run's deadline fall while the call its breakpoint holds runs, however long
    the steps before it took on a busy machine (a fixed `--time-limit` of a few seconds
    ran out before them at load 15): at the breakpoint, where the clock stands still,
    the run is left `left_s` and the call approved. More than the deadline watcher's
    longest nap (5 s, agent/loop/drive.py), so it wakes to the nearer deadline in time,
    as with a limit given at the start."""
    from mlra import events as ev

    def approve(call_id: str) -> None:
        controller.clock.limit_s = controller.clock.elapsed() + left_s
        controller.approve(call_id)

    def seen(event: ev.Event) -> None:
        if isinstance(event, ev.ApprovalRequested):
            asyncio.get_running_loop().call_soon(approve, event.call_id)

    controller.subscribe(seen)


class HeldClock(RunClock):
    """A run clock that stands still, at `already` seconds, until `go()`: the run's
    start and its pauses' ends start it only after that."""

    def __init__(self, limit_s: float, *, already: float = 0.0) -> None:
        super().__init__(limit_s, already=already)
        self.held = True

    def start(self) -> None:
        if not self.held:
            super().start()

    resume = start

    def go(self) -> None:
        self.held = False
        self.start()


def clock_from(
    controller: RunController, starts: Callable[[ev.Event], bool], *, already: float = 0.0
) -> None:
    """Count the run's time limit from the first event `starts` accepts (the clock stands
    still before it), so the steps before the one a deadline test waits on take what
    they take on a busy machine (a fixed limit of a few seconds ran out before them at
    load 15), and the limit is the one given, in the log and the prompts. The clock
    stands at `already` till then (a recorded limit with room for a replay, less left)."""
    clock = HeldClock(controller.clock.limit_s, already=already)
    controller.clock = clock

    def seen(event: ev.Event) -> None:
        if clock.held and starts(event):
            clock.go()

    controller.subscribe(seen)


def processes_running(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line holds `marker` (pids differ in a
    sandbox's pid namespace, so the command line is what identifies them)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "status").read_text()
        except OSError:
            continue
        if marker in cmdline and "zombie" not in state and "pytest" not in cmdline:
            found.append(int(proc.name))
    return found


TEST_SOCKET = (
    Path(os.environ.get("MLRA_TEST_DOCKER_DIR", "/var/tmp/mlra-test-docker")) / "docker.sock"
)
"""Where docker/test-engine.sh starts its private engine."""
TEST_IMAGE = os.environ.get("MLRA_TEST_IMAGE", "mlra-test:latest")


def docker_address() -> str | None:
    """The engine's address: DOCKER_HOST, else the socket docker/test-engine.sh makes."""
    host = os.environ.get("DOCKER_HOST")
    if host:
        return host
    return f"unix://{TEST_SOCKET}" if TEST_SOCKET.exists() else None


def docker_problem() -> str | None:
    """Why the Docker tests cannot run here (said when they skip), or None."""
    try:
        from docker.errors import ImageNotFound

        import docker
    except ImportError:
        return "the docker Python package is not installed"
    host = docker_address()
    if host is None:
        return "no Docker engine: set DOCKER_HOST or run docker/test-engine.sh (needs root)"
    try:
        client = docker.DockerClient(base_url=host, timeout=10)
        client.ping()
        client.images.get(TEST_IMAGE)
    except ImageNotFound:
        return f"the test image {TEST_IMAGE} is not built (run docker/test-engine.sh)"
    except Exception as exc:
        return f"the Docker engine at {host} does not answer: {exc}"
    return None


@pytest.fixture(scope="module")
def docker_host() -> Iterator[str]:
    """The engine's address, set as DOCKER_HOST for the module's tests; skips them,
    saying why, where there is no engine or no test image."""
    problem = docker_problem()
    if problem is not None:
        pytest.skip(problem)
    host = docker_address()
    assert host is not None
    previous = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = host
    yield host
    if previous is None:
        os.environ.pop("DOCKER_HOST", None)
    else:
        os.environ["DOCKER_HOST"] = previous


@pytest.fixture
def client(docker_host: str) -> Any:
    """A client of the test engine (the `docker` package's)."""
    import docker

    return docker.DockerClient(base_url=docker_host, timeout=30)


SMALL_DISK_MB = 4096


@pytest.fixture
def disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A real small disk: a 4 GiB ext4 image mounted as root (a reserve of 2 GiB), for
    what the runs disk's free space decides (tests/tools/test_disk_claim.py,
    tests/agent/test_start_refused.py). Those modules skip where volumes cannot be made."""
    image, point = tmp_path / "disk.img", tmp_path / "disk"
    point.mkdir()
    subprocess.run(["truncate", "-s", f"{SMALL_DISK_MB}M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(point)], check=True)
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=False)


# The README's runs, made once per session for the slow tests that read them.
from tests.readme_runs import (  # noqa: E402, F401
    readme_baseline_run,
    readme_demo_run,
    readme_folder,
    readme_search_run,
)
