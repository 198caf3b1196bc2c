"""`mlra ctl`: a headless scripted run in one process, steered from others.

The run is the real command line (`mlra run --no-tui`) against the scripted model
server; each control is the real `mlra ctl` in a process of its own. The test waits
on the run's events through its control socket (`watch`), never on the clock,
except where it checks that nothing happens while the run is paused: there it
looks for a short while, as a person watching would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mlra.agent.record.eventlog import read_events
from mlra.control_socket import CtlRequest, connect, encode, socket_path
from mlra.events import PlanUpdated
from mlra.tools.sandbox import bwrap as bw
from tests.conftest import ANSWER_TASK, SECRET_ENV, mlra_cli, processes_running
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

pytestmark = pytest.mark.skipif(bw.find_bwrap() is None, reason="needs bubblewrap")

MODEL = "openai/test-model"
QUIET_S = 0.4
"""How long the paused run is looked at for a sign of life (none may come)."""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    env["OPENAI_API_KEY"] = "sk-test-not-a-secret"
    return env


class Watch:
    """The run's events as its control socket streams them, on a thread of the test."""

    def __init__(self, run_dir: Path) -> None:
        self.events: list[dict[str, Any]] = []
        self.ended = False
        self._changed = threading.Condition()
        self._sock = connect(run_dir, timeout=60)
        self._sock.sendall(encode(CtlRequest(op="watch")))
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError), self._sock.makefile("rb") as lines:
            for line in lines:
                reply = json.loads(line)
                with self._changed:
                    if reply.get("event") is not None:
                        self.events.append(reply["event"])
                    self.ended = self.ended or reply.get("ended", False)
                    self._changed.notify_all()
        with self._changed:
            self.ended = True
            self._changed.notify_all()

    def wait_for(self, what: str, found: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        with self._changed:
            ok = self._changed.wait_for(
                lambda: any(found(e) for e in self.events) or self.ended, timeout=60
            )
            hits = [e for e in self.events if found(e)]
        if not hits:
            raise AssertionError(f"the run never showed {what} (ended: {self.ended}, {ok})")
        return hits[0]

    def wait_end(self) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self.ended, timeout=60), "the run never ended"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


@contextlib.contextmanager
def live_run(
    script: dict[str, Any], root: Path, *flags: str
) -> Iterator[tuple[subprocess.Popen[bytes], Path, ScriptedModelServer, Watch]]:
    """`mlra run --no-tui` in a process of its own, once its control socket answers."""
    runs = root / "runs"
    run_dir = runs / "r"
    with ScriptedModelServer(script) as server:
        args = ["run", str(ANSWER_TASK), "--model", MODEL, "--base-url", server.url_for("openai")]
        args += ["--no-tui", "--runs-dir", str(runs), "--run-id", "r", *flags]
        err = (root / "run.stderr").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlra", *args],
            cwd=root,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        watch: Watch | None = None
        try:
            deadline = time.monotonic() + 60
            while not socket_path(run_dir).exists():  # another process makes it: poll
                assert proc.poll() is None, (root / "run.stderr").read_text()[-2000:]
                assert time.monotonic() < deadline, "the run never opened its control socket"
                time.sleep(0.01)
            watch = Watch(run_dir)
            yield proc, run_dir, server, watch
        finally:
            if watch is not None:
                watch.close()
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
            err.close()


def ctl(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return mlra_cli(["ctl", "r", *args, "--runs-dir", str(root / "runs")], cwd=root, env=_env())


def _controls(run_dir: Path) -> list[tuple[str, str]]:
    return [
        (e.action, e.source) for e in read_events(run_dir / "events.jsonl") if e.type == "control"
    ]


def _events(log: Path) -> list[Any]:
    """The log as far as it is written (none before its file exists)."""
    return read_events(log) if log.exists() else []


def _of_call(kind: str, call_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e["type"] == kind and e.get("call_id") == call_id


REACH_SOCKET = (
    "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{path}'); "
    "print('REACHED')\"; ls {run_dir} 2>&1 | head -3; echo 42 > answer.txt"
)


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A folder other users may pass through, as a home folder often is: what keeps them
    from the socket is its own mode and the server's check, not the folders above it."""
    root = Path(tempfile.mkdtemp(prefix="mlra-ctl-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def test_approve_inject_status_and_who_may_reach_the_socket(open_root: Path) -> None:
    root = open_root
    run_dir = (root / "runs" / "r").resolve()
    sock = socket_path(run_dir)
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn(
                "Try the socket.",
                call("bash", command=REACH_SOCKET.format(path=sock, run_dir=run_dir)),
            ),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    with live_run(script, root, "--break", "bash") as (proc, run_dir, server, watch):
        asked = watch.wait_for("the call waiting", lambda e: e["type"] == "approval_requested")
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600

        status = ctl(root, "status", "--json")
        assert status.returncode == 0, status.stderr
        reply = json.loads(status.stdout)
        assert reply["ok"] and reply["status"]["state"] == "waiting"
        assert [p["tool"] for p in reply["status"]["pending"]] == ["bash"]
        human = ctl(root, "status")
        assert f"waiting: {asked['call_id']} (worker) bash" in human.stdout
        # Paused too, it says so: resume (or step) is what lets an approved call run.
        assert ctl(root, "pause").returncode == 0
        paused = ctl(root, "status")
        assert paused.stdout.splitlines()[1].startswith("waiting, paused · "), paused.stdout
        assert json.loads(ctl(root, "status", "--json").stdout)["status"]["paused"]
        assert ctl(root, "resume").returncode == 0

        # Another user of the machine: the run folder (0700) keeps them out; were it
        # opened, the socket's own mode would; were that loosened too, the server's check
        # of who connects still would.
        assert _connect_as_nobody(run_dir) == "PermissionError"
        run_dir.chmod(0o755)
        assert _connect_as_nobody(run_dir) == "PermissionError"
        sock.chmod(0o666)
        assert _connect_as_nobody(run_dir) == "refused: this run is not yours to steer"
        sock.chmod(0o600)
        run_dir.chmod(0o700)

        wrong = ctl(root, "reject", "--call", "nope", "not that one")
        assert wrong.returncode == 1
        assert wrong.stderr.strip() == (
            f"refused: call nope does not wait for approval (waiting: {asked['call_id']})"
        )
        # A rule naming no tool of the run's agents would never fire: refused, as it is.
        typo = ctl(root, "breakpoints", "bash", "bsah")
        assert typo.returncode == 1
        assert typo.stderr.startswith(
            "refused: breakpoint 'bsah': no tool of this run's agents is named 'bsah' "
            "(did you mean bash?); the supervisor's tools: update_plan, assign_subtask"
        ), typo.stderr
        assert "the breakpoints are unchanged" in typo.stderr
        empty = ctl(root, "breakpoints", ":")
        assert empty.returncode == 1 and "write '*' for that" in empty.stderr, empty.stderr
        assert json.loads(ctl(root, "status", "--json").stdout)["status"]["breakpoints"] == ["bash"]
        rules = ctl(root, "breakpoints", "bash:rm -rf", "--json")
        assert json.loads(rules.stdout) == {
            "ok": True,
            "message": "breakpoints: bash:rm -rf",
            "ended": False,
        }
        told = ctl(root, "inject", "the answer is 42, from ctl")
        assert told.returncode == 0, told.stderr
        approved = ctl(root, "approve")
        assert approved.returncode == 0 and "approved" in approved.stdout, approved.stderr
        again = ctl(root, "approve")
        assert again.returncode == 1
        assert again.stderr.strip() == "refused: no call waits for approval"

        result = watch.wait_for("the held call's result", _of_call("tool_result", asked["call_id"]))
        assert "REACHED" not in result["output"]  # the sandbox never sees the run folder
        assert "No such file" in result["output"] or "Error" in result["output"]
        watch.wait_end()
        assert proc.wait(timeout=60) == 0

    first, after = server.requests_for("worker")[:2]  # the model's next request reads it
    assert "from ctl" not in json.dumps(first.body)
    assert "[message from the user] the answer is 42, from ctl" in json.dumps(
        after.body["messages"][-1]
    )
    assert [c for c in _controls(run_dir) if c[1] == "ctl"] == [
        ("pause", "ctl"),
        ("resume", "ctl"),
        ("breakpoints", "ctl"),
        ("inject", "ctl"),
        ("approve", "ctl"),
    ]
    assert not sock.exists()

    done = ctl(root, "status")  # answered, not refused: how it ended
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.strip() == "r has ended (finished, submitted; score 1)"
    as_json = json.loads(ctl(root, "status", "--json").stdout)
    assert as_json == {"ok": True, "message": done.stdout.strip(), "ended": True}
    stopped = ctl(root, "stop", "--json")
    assert stopped.returncode == 1 and json.loads(stopped.stdout)["ok"] is False


def _connect_as_nobody(run_dir: Path) -> str:
    """What another user (uid 65534) gets trying the socket: an error's name or the
    server's first line. A forked child, since that user may not run this interpreter."""
    path = str(socket_path(run_dir))
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only system calls, then out
        try:
            os.close(readable)
            os.setuid(65534)
            sock = socket.socket(socket.AF_UNIX)
            sock.settimeout(20)
            try:
                sock.connect(path)
                with contextlib.suppress(BrokenPipeError):  # refused before it asked
                    sock.sendall(b'{"op": "status"}\n')
                said = sock.makefile().readline()
            except OSError as exc:
                said = type(exc).__name__
            os.write(writable, said.encode())
        finally:
            os._exit(0)
    os.close(writable)
    with os.fdopen(readable, "rb") as pipe:
        line = pipe.read().decode().strip()
    os.waitpid(pid, 0)
    with contextlib.suppress(ValueError):
        return json.loads(line)["message"]
    return line


TICKER = "while true; do echo t >> ticks.txt; sleep 0.02; done"
WAIT_GO = "while [ ! -e go ]; do sleep 0.02; done; echo went"


def test_pause_holds_agent_and_jobs_then_stop_grades(tmp_path: Path) -> None:
    script = {
        "supervisor": supervisor_answering(),
        "supervisor:fallback": turn("", call("submit", path="answer.txt", note="the answer")),
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", {"name": "job_start", "arguments": {"command": TICKER, "name": "ticker"}}),
            turn("", call("bash", command=WAIT_GO)),
            turn("", call("bash", command="while [ ! -e go-on ]; do sleep 0.02; done")),
        ],
        "worker:fallback": turn("", call("report", summary="answer.txt holds 42")),
    }
    with live_run(script, tmp_path) as (proc, run_dir, server, watch):
        workspace = run_dir / "workspace"
        waiting = watch.wait_for(
            "the command waiting for go", lambda e: e["type"] == "tool_call" and "go ]" in str(e)
        )
        asked = len(server.requests)
        assert ctl(tmp_path, "pause").returncode == 0
        assert set(_states(TICKER)) == {"T"}  # the job's processes are stopped
        (workspace / "go").touch()
        ticks = (workspace / "ticks.txt").stat().st_size
        time.sleep(QUIET_S)  # a paused run shows no sign of life (looked at for a while)
        assert (workspace / "ticks.txt").stat().st_size == ticks
        assert len(server.requests) == asked
        assert not any(_of_call("tool_result", waiting["call_id"])(e) for e in watch.events)
        twice = ctl(tmp_path, "pause")
        assert (
            twice.returncode == 1 and twice.stderr.strip() == "refused: the run is paused already"
        )
        paused = json.loads(ctl(tmp_path, "status", "--json").stdout)["status"]
        assert paused["state"] == "paused" and paused["running_jobs"] == ["job-1"]

        listed = mlra_cli(["runs", "--runs-dir", str(tmp_path / "runs")], cwd=tmp_path)
        assert "running (live)" in listed.stdout.splitlines()[1]
        assert "(live): the run answers on its control socket" in listed.stderr

        assert ctl(tmp_path, "resume").returncode == 0
        watch.wait_for("the command's end", _of_call("tool_result", waiting["call_id"]))
        watch.wait_for("the next hold", lambda e: e["type"] == "tool_call" and "go-on" in str(e))
        assert (workspace / "ticks.txt").stat().st_size > ticks
        stopping = ctl(tmp_path, "stop")
        assert stopping.returncode == 0, stopping.stderr
        watch.wait_end()
        proc.wait(timeout=60)

    result = json.loads((run_dir / "result.json").read_text())
    assert result["reason"] == "stopped" and result["score"] == 1.0
    controls = _controls(run_dir)
    assert [a for a, s in controls if s == "ctl"] == ["pause", "resume", "stop"]
    assert not processes_running("ticks.txt")
    listed = mlra_cli(["runs", "--json", "--runs-dir", str(tmp_path / "runs")], cwd=tmp_path)
    assert json.loads(listed.stdout)["live"] is False
    ended = ctl(tmp_path, "resume")
    assert ended.returncode == 1 and "r has ended (finished, stopped" in ended.stderr


def _states(marker: str) -> list[str]:
    states = []
    for pid in processes_running(marker):
        with contextlib.suppress(OSError):
            text = Path(f"/proc/{pid}/stat").read_text()
            states.append(text[text.rfind(")") + 2])
    return states


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    missing = ctl(tmp_path, "status")
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "no run 'r'" in missing.stderr
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir()
    (run_dir / "events.jsonl").write_bytes(b"")
    for args in (
        ["approve", "now"],
        ["inject"],
        ["edit", "[1]"],
        ["stop-job"],
        ["pause", "--call", "x"],
    ):
        bad = ctl(tmp_path, *args)
        assert bad.returncode == 2, (args, bad.stderr)
        assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    gone = ctl(tmp_path, "pause")
    assert gone.returncode == 1
    assert gone.stderr.strip() == (
        "refused: r is not running (stopped without an end): mlra resume r goes on with it"
    )
    stale = socket.socket(socket.AF_UNIX)  # a killed run's socket: nobody answers it
    stale.bind(str(socket_path(run_dir)))
    stale.close()
    killed = ctl(tmp_path, "status")  # answered: how it stands
    assert killed.returncode == 0 and "r is not running (stopped without an end)" in killed.stdout
    assert ctl(tmp_path, "pause").returncode == 1


def test_a_message_to_the_baseline_agent_is_refused_as_no_one_reads_it(tmp_path: Path) -> None:
    """The baseline follows its recipe: a queued message would be read by nobody, as its
    fork's edited action already was refused."""
    runs = tmp_path / "runs"
    run_dir = runs / "b"
    args = ["run", str(ANSWER_TASK), "--model", "baseline", "--no-tui", "--paused"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlra", *args, "--runs-dir", str(runs), "--run-id", "b"],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Only a guard: the run's start is awaited, however long a busy machine takes.
        deadline = time.monotonic() + 300
        log = run_dir / "events.jsonl"
        # Another process makes them: poll for the socket, then for `run_started` (a
        # control before it is refused as "still starting": its sandbox is being made).
        while not socket_path(run_dir).exists() or not (log.exists() and log.stat().st_size):
            assert proc.poll() is None and time.monotonic() < deadline, "no run_started"
            time.sleep(0.01)
        # Paused before its first step: its plan shows no step running (the recipe's
        # plan and a step's start are written in one go, so the first plan is enough).
        log = run_dir / "events.jsonl"
        while not (plans := [e for e in _events(log) if isinstance(e, PlanUpdated)]):
            assert proc.poll() is None and time.monotonic() < deadline, "no plan"
            time.sleep(0.01)
        assert [s.status for p in plans for s in p.steps if s.status != "pending"] == []
        told = mlra_cli(["ctl", str(run_dir), "inject", "use a smaller lr"], cwd=tmp_path)
        assert told.returncode == 1, told.stdout
        assert told.stderr.strip() == (
            "refused: the baseline agent follows its recipe and reads no messages"
        )
        assert mlra_cli(["ctl", str(run_dir), "resume"], cwd=tmp_path).returncode == 0
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [c for c in _controls(run_dir) if c[0] == "inject"] == []
    fork = mlra_cli(
        ["fork", str(run_dir), "--at", "1", "--message", "try again", "--no-tui"], cwd=tmp_path
    )
    assert fork.returncode == 2 and fork.stderr.strip().splitlines() == [
        "mlra: --message: the baseline agent follows its recipe and reads no messages"
    ], fork.stderr


def test_step_help_says_what_it_does_while_running() -> None:
    from mlra.console.cli.ctl_cli import ACTIONS

    assert "while running: the action in hand finishes, then the run pauses" in ACTIONS["step"]
