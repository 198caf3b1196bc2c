"""A pre-imported `mlra` that the tests fork command lines from.

Why: most of the fast suite's CPU went to starting `python -m mlra` children, each
importing the pydantic event models, the command line and, for a model run, the
OpenAI and Anthropic SDKs (0.5-1 s of CPU each on the 2-core machine, a few hundred
times a suite). The zygote imports them once per test worker and forks one child per
command line. The child is still a separate process with its own working directory,
environment, argv, standard streams, signals and exit status, and it runs the same
`main()` that `python -m mlra` runs, then the interpreter's exit steps (non-daemon
threads joined, atexit handlers run, streams flushed), so a test sees what a shell
would. `MLRA_TEST_SUBPROCESS=1` turns it off (every command line a fresh interpreter).

Protocol over the zygote's stdin/stdout, one JSON object a line: a request
`{"argv", "cwd", "env", "stdout", "stderr"}` is answered by `{"pid"}` once the child
is forked and `{"status"}` (its exit code, negative for a signal) once it has ended.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

# What a command line imports that is worth importing once. Nothing here may read the
# environment or the working directory at import time (the child's differ): the
# product's modules do not, and neither do these SDKs (they read it when a client is made).
PRELOAD = (
    "mlra.console.cli.cli",
    "mlra.console.apps.headless_run",
    "mlra.console.cli.runs_cli",
    "mlra.console.cli.replay_cli",
    "mlra.console.cli.resume_cli",
    "mlra.console.cli.batch_cli",
    "mlra.console.cli.report_cli",
    "mlra.agent.providers.openai",
    "mlra.agent.providers.anthropic",
    "mlra.batch.runner",
    "mlra.tasks.evaluators.base",
)


def _child(request: dict[str, object]) -> int:
    """The forked child: become the command line the request describes, run it, exit."""
    os.chdir(str(request["cwd"]))
    env = request["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd, key in ((1, "stdout"), (2, "stderr")):
        out = os.open(str(request[key]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    os.close(devnull)
    argv = request["argv"]
    assert isinstance(argv, list)
    # `python -m mlra` names its own file as argv[0].
    sys.argv = [str(Path(sys.modules["mlra"].__file__ or "mlra").parent / "__main__.py"), *argv]
    code: int
    try:
        from mlra.console.cli.cli import main

        code = _exit_code(main())
    except SystemExit as exit_:
        code = _exit_code(exit_.code)
    except BaseException:  # what the interpreter does with an uncaught exception
        import traceback

        traceback.print_exc()
        code = 1
    return code


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def _finish(code: int) -> None:
    """The interpreter's exit steps a forked child would otherwise skip, then exit."""
    try:
        threading._shutdown()  # pyright: ignore[reportAttributeAccessIssue]  # joins non-daemon threads
        import atexit

        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def serve() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    answers = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        answers.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(request)
            finally:
                _finish(code)
        answers.write(json.dumps({"pid": pid}) + "\n")
        answers.flush()
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
        answers.flush()


class Zygote:
    """The worker's side: one zygote process, one command line at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._pending = b""

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", "from tests.zygote import serve; serve()"],
                cwd=Path(__file__).resolve().parent.parent,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
            )
            self._pending = b""
        return self._proc

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout: float,
        out_dir: Path,
    ) -> subprocess.CompletedProcess[str] | None:
        """The command line's outcome, or None when the zygote is busy or gone (the
        caller then starts a fresh interpreter instead)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            proc = self._started()
            assert proc.stdin is not None and proc.stdout is not None
            stdout, stderr = out_dir / "stdout", out_dir / "stderr"
            request = {
                "argv": list(argv),
                "cwd": str(cwd),
                "env": dict(env),
                "stdout": str(stdout),
                "stderr": str(stderr),
            }
            try:
                proc.stdin.write((json.dumps(request) + "\n").encode())
                answer = self._answer(proc.stdout.fileno(), None)
                assert answer is not None
                pid = int(answer["pid"])
            except (OSError, EOFError, ValueError, KeyError):
                self.close()
                return None
            answer = self._answer(proc.stdout.fileno(), timeout)
            if answer is None:  # as subprocess.run does on a timeout: kill, then raise
                os.kill(pid, 9)
                self._answer(proc.stdout.fileno(), None)
                raise subprocess.TimeoutExpired(
                    ["mlra", *argv], timeout, stdout.read_text(), stderr.read_text()
                )
            return subprocess.CompletedProcess(
                [sys.executable, "-m", "mlra", *argv],
                int(answer["status"]),
                stdout.read_text(errors="replace"),
                stderr.read_text(errors="replace"),
            )
        finally:
            self._lock.release()

    def _answer(self, fd: int, timeout: float | None) -> dict[str, int] | None:
        """The zygote's next answer line, or None on a timeout. Read unbuffered, so a
        line already read can never hide behind `select`."""
        while b"\n" not in self._pending:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise EOFError("the zygote ended")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return json.loads(line)

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None
