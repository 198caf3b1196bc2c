"""The evaluator interface, and how the host runs one in a fresh process.

Grading never trusts a number the agent reports: the task's evaluator runs on
the submitted artifact in a separate Python process started by the host, with
an environment built from scratch (no API keys), and its score is what the log
and `result.json` record.
"""

from __future__ import annotations

import abc
import asyncio
import importlib
import json
import os
import sys
import time
from pathlib import Path

from pydantic import BaseModel, Field

from mlra.agent.clock import parse_duration
from mlra.tasks.spec import TaskSpec

EVALUATORS: dict[str, str] = {
    "lm-eval": "mlra.tasks.evaluators.lm_eval:LmEvalEvaluator",
    "script": "mlra.tasks.evaluators.script:ScriptEvaluator",
}


class EvalOutcome(BaseModel):
    ok: bool
    score: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    violations: list[str] = Field(default_factory=list)
    """Rules the submission breaks; a submission that breaks one gets no score."""
    error: str | None = None
    details: dict[str, object] = Field(default_factory=dict)


class Evaluator(abc.ABC):
    """Grades one artifact for one task. Runs inside the fresh evaluation process."""

    def __init__(self, task: TaskSpec) -> None:
        self.task = task

    @abc.abstractmethod
    def evaluate(self, artifact: Path, *, work_dir: Path) -> EvalOutcome:
        """Score `artifact`; `work_dir` is scratch space outside the workspace."""


def load_evaluator(task: TaskSpec) -> Evaluator:
    target = EVALUATORS[task.evaluator.kind]
    module_name, _, class_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(task)


def normalize(score: float | None, baseline: float | None, top: float | None) -> float | None:
    """(score - baseline) / (top - baseline): 0 at the baseline, 1 at the top reference.

    The same formula serves lower-is-better metrics, where top < baseline.
    """
    if score is None or baseline is None or top is None or top == baseline:
        return None
    return (score - baseline) / (top - baseline)


def evaluation_env(task: TaskSpec) -> dict[str, str]:
    """The evaluator's environment, built explicitly: nothing secret from the host."""
    env = {
        "PATH": os.pathsep.join(
            [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
        ),
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    for passthrough in (
        "HF_HOME",
        "HF_DATASETS_CACHE",
        "TMPDIR",
        "CUDA_VISIBLE_DEVICES",
        # A host that says it is offline is offline for the evaluator too.
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "TRANSFORMERS_OFFLINE",
    ):
        if passthrough in os.environ:
            env[passthrough] = os.environ[passthrough]
    if not task.resources.network:
        env["HF_HUB_OFFLINE"] = "1"
        env["HF_DATASETS_OFFLINE"] = "1"
        env["TRANSFORMERS_OFFLINE"] = "1"
    return env


async def run_evaluation(task: TaskSpec, artifact: Path, work_dir: Path) -> EvalOutcome:
    """Run the task's evaluator on `artifact` in a fresh process; never raises for bad artifacts."""
    work_dir.mkdir(parents=True, exist_ok=True)
    out = work_dir / "evaluation.json"
    out.unlink(missing_ok=True)
    log_path = work_dir / "evaluation.log"
    timeout = parse_duration(task.evaluator.timeout)
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "mlra.tasks.evaluators.runner",
            str(task.root),
            str(artifact),
            str(out),
            str(work_dir),
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            env=evaluation_env(task),
            start_new_session=True,
        )
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except (TimeoutError, asyncio.CancelledError):
            _kill_group(proc.pid)
            await proc.wait()
            if not out.exists():
                return EvalOutcome(ok=False, error=f"evaluation timed out after {timeout:.0f}s")
    if out.exists():
        try:
            return EvalOutcome.model_validate(json.loads(out.read_text()))
        except (ValueError, json.JSONDecodeError) as exc:
            return EvalOutcome(ok=False, error=f"evaluator wrote an unreadable result: {exc}")
    tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
    took = time.monotonic() - started
    return EvalOutcome(
        ok=False,
        error=f"evaluator exited with status {proc.returncode} after {took:.0f}s: "
        + " | ".join(tail),
    )


def _kill_group(pid: int) -> None:
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
