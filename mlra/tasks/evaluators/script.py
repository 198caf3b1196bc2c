"""The script evaluator: the task's own evaluation script, run on the submission
against hidden data the agent never saw, in a sandbox of its own.

The script is a hidden task file. It runs confined like the agent's commands
(bubblewrap where installed: the host read-only, no network, a fresh /tmp, no
secrets in its environment), with the submission and the task folder visible
read-only: mlra only ever runs an evaluator inside the evaluation process it starts
(tasks/evaluators/base.py), where that confinement is already in place around the
whole evaluator, and bubblewrap cannot nest, so the script runs as a plain child
process of it. It is called as

    python SCRIPT ARTIFACT TASK_ROOT OUT_JSON [ARGS...]

It must write `{"score": ..., "metrics": {...}}` (optionally `"violations": [...]`)
as JSON to OUT_JSON.

`python` is the task's own environment's where the task declares one
(tasks/environment.py), as it is for the agent's commands: the script is graded with
the packages it was written for. One not built is a task error, never mlra's own
interpreter in its place.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from mlra.durations import parse_duration
from mlra.tasks.environment import missing_environment, task_python
from mlra.tasks.evaluators.base import ISOLATION_VAR, EvalOutcome, Evaluator
from mlra.tools.sandbox.env import is_secret_name


class ScriptEvaluator(Evaluator):
    def evaluate(self, artifact: Path, *, work_dir: Path) -> EvalOutcome:
        settings = self.task.evaluator.settings
        script = settings.get("script")
        if not isinstance(script, str):
            return EvalOutcome(ok=False, error="task error: evaluator.settings.script is not set")
        script_path = (self.task.root / script).resolve()
        if not script_path.is_file():
            return EvalOutcome(ok=False, error=f"task error: evaluation script {script} is missing")
        if not artifact.exists():
            return EvalOutcome(
                ok=False, error=f"nothing was submitted: {artifact.name} does not exist"
            )
        missing = missing_environment(self.task)
        if missing is not None:  # never mlra's own interpreter in its place, in silence
            return EvalOutcome(ok=False, error=f"task error: {missing}")
        extra = [str(a) for a in settings.get("args", [])]
        # Called directly, outside mlra's evaluation process, nothing confines it: say so.
        isolation = os.environ.get(ISOLATION_VAR) or "none"
        return self._run_here(script_path, artifact, work_dir, extra, isolation)

    def _run_here(
        self, script: Path, artifact: Path, work_dir: Path, extra: list[str], isolation: str
    ) -> EvalOutcome:
        """Run the script as a child of this evaluation process, inside its confinement."""
        box_dir = work_dir / "script"
        box_dir.mkdir(parents=True, exist_ok=True)
        out = box_dir / "script-result.json"
        out.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if not is_secret_name(k)}
        env.update({k: str(v) for k, v in self.task.sandbox.env.items() if not is_secret_name(k)})
        timeout = parse_duration(self.task.evaluator.timeout)
        python = task_python(self.task)  # the task's own environment, where it has one
        if python is not None:
            env["PATH"] = os.pathsep.join([str(python.parent), env.get("PATH", "")])
        argv = [
            str(python) if python is not None else sys.executable,
            str(script),
            str(artifact.resolve()),
            str(self.task.root),
            str(out),
            *extra,
        ]
        proc = subprocess.Popen(
            argv,
            cwd=box_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert proc.stdout is not None
        chunks: list[bytes] = []
        # Passed on as it comes: the evaluation process's output is the grading's
        # progress, which the run shows (tasks/evaluators/progress.py).
        passing = threading.Thread(target=_pass_on, args=(proc.stdout, chunks), daemon=True)
        passing.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        passing.join()
        text = b"".join(chunks).decode(errors="replace")
        return _outcome(proc.returncode, timed_out, text, out, timeout, {"isolation": isolation})


def _pass_on(pipe: IO[bytes], chunks: list[bytes]) -> None:
    """Keep the script's output and write it on to this process's stdout at once."""
    out = sys.stdout.buffer
    with pipe:
        while chunk := os.read(pipe.fileno(), 65536):
            chunks.append(chunk)
            with contextlib.suppress(OSError, ValueError):
                out.write(chunk)
                out.flush()


def _outcome(
    exit_code: int | None,
    timed_out: bool,
    output: str,
    out: Path,
    timeout: float,
    details: dict[str, object],
) -> EvalOutcome:
    """The script's result file read into an outcome, or why there is none."""
    if timed_out:
        return EvalOutcome(
            ok=False, error=f"evaluation script timed out after {timeout:.0f}s", details=details
        )
    if exit_code != 0 or not out.exists():
        tail = " | ".join(output.strip().splitlines()[-3:])
        return EvalOutcome(
            ok=False,
            error=f"evaluation script failed (exit {exit_code}): {tail}",
            details=details,
        )
    try:
        data = json.loads(out.read_text())
        score = float(data["score"])
    except (ValueError, KeyError, TypeError) as exc:
        return EvalOutcome(
            ok=False, error=f"evaluation script wrote no usable score: {exc}", details=details
        )
    metrics = {k: float(v) for k, v in (data.get("metrics") or {}).items()}
    violations = [str(v) for v in data.get("violations") or []]
    return EvalOutcome(
        ok=True, score=score, metrics=metrics, violations=violations, details=details
    )
