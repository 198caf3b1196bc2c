"""The script evaluator: the task's own evaluation script, run on the submission
against hidden data the agent never saw, in a sandbox of its own.

The script is a hidden task file. It runs confined like the agent's commands
(bubblewrap where installed: the host read-only, no network, a fresh /tmp, no
secrets in its environment), with the submission and the task folder visible
read-only, and is called as

    python SCRIPT ARTIFACT TASK_ROOT OUT_JSON [ARGS...]

It must write `{"score": ..., "metrics": {...}}` (optionally `"violations": [...]`)
as JSON to OUT_JSON.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from mlra.agent.clock import parse_duration
from mlra.tasks.evaluators.base import EvalOutcome, Evaluator
from mlra.tools.sandbox.base import SandboxError, SandboxSpec


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
        extra = [str(a) for a in settings.get("args", [])]
        return asyncio.run(self._run(script_path, artifact, work_dir, extra))

    async def _run(
        self, script: Path, artifact: Path, work_dir: Path, extra: list[str]
    ) -> EvalOutcome:
        from mlra.tools.sandbox.local import LocalSandbox

        box_dir = work_dir / "script"
        box_dir.mkdir(parents=True, exist_ok=True)
        out_host = box_dir / "script-result.json"
        out_host.unlink(missing_ok=True)
        spec = SandboxSpec(
            network=self.task.resources.network,
            env=self.task.sandbox.env,
            read_only=[artifact.resolve(), self.task.root],
        )
        box = LocalSandbox(box_dir, spec, isolation_mode="auto")
        timeout = parse_duration(self.task.evaluator.timeout)
        try:
            await box.start()
            out_inside = f"{box.workdir}/script-result.json"
            result = await box.exec(
                [
                    "python",
                    str(script),
                    str(artifact.resolve()),
                    str(self.task.root),
                    out_inside,
                    *extra,
                ],
                timeout=timeout,
            )
        except SandboxError as exc:
            return EvalOutcome(ok=False, error=f"could not run the evaluation script: {exc}")
        finally:
            await box.close()
        details: dict[str, object] = {"isolation": box.isolation}
        if result.timed_out:
            return EvalOutcome(
                ok=False, error=f"evaluation script timed out after {timeout:.0f}s", details=details
            )
        if result.exit_code != 0 or not out_host.exists():
            tail = " | ".join(result.output.strip().splitlines()[-3:])
            return EvalOutcome(
                ok=False,
                error=f"evaluation script failed (exit {result.exit_code}): {tail}",
                details=details,
            )
        try:
            data = json.loads(out_host.read_text())
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
