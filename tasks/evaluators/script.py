"""The script evaluator: the task's own evaluation script, run on the submission
against hidden data the agent never saw.

The script is a hidden task file. It is started in its own process (inside the
fresh evaluation process) with the submitted artifact's path, the hidden files'
folder and an output path, and must write `{"score": ..., "metrics": {...}}`
(optionally `"violations": [...]`) as JSON to the output path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mlra.agent.clock import parse_duration
from mlra.tasks.evaluators.base import EvalOutcome, Evaluator


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
        out = work_dir / "script-result.json"
        out.unlink(missing_ok=True)
        timeout = parse_duration(self.task.evaluator.timeout)
        extra = [str(a) for a in settings.get("args", [])]
        try:
            proc = subprocess.run(
                [
                    sys.executable,
                    str(script_path),
                    str(artifact),
                    str(self.task.root),
                    str(out),
                    *extra,
                ],
                cwd=work_dir,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return EvalOutcome(ok=False, error=f"evaluation script timed out after {timeout:.0f}s")
        if proc.returncode != 0 or not out.exists():
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            return EvalOutcome(
                ok=False, error=f"evaluation script failed (exit {proc.returncode}): {tail}"
            )
        try:
            data = json.loads(out.read_text())
            score = float(data["score"])
        except (ValueError, KeyError, TypeError) as exc:
            return EvalOutcome(ok=False, error=f"evaluation script wrote no usable score: {exc}")
        metrics = {k: float(v) for k, v in (data.get("metrics") or {}).items()}
        violations = [str(v) for v in data.get("violations") or []]
        return EvalOutcome(ok=True, score=score, metrics=metrics, violations=violations)
