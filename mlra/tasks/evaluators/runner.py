"""Entry point of the fresh evaluation process: `python -m mlra.tasks.evaluators.runner`.

Arguments: task folder, artifact path, output JSON path, scratch folder, and the
split ("test" when left out; "validation"; "format": the rules and the artifact's
form only, for a task without validation data). Writes
an `EvalOutcome` as JSON; a crash of the evaluator is written as an error outcome.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

from mlra.tasks.challenge import quote_rules
from mlra.tasks.constraints import check
from mlra.tasks.evaluators.base import (
    ISOLATION_VAR,
    EvalOutcome,
    Split,
    load_evaluator,
    split_task,
)
from mlra.tasks.spec import load_task


def main(argv: list[str]) -> int:
    task_dir, artifact, out, work_dir = (Path(a) for a in argv[:4])
    split: Split = "test"
    if len(argv) > 4 and argv[4] in ("validation", "format"):
        split = "validation" if argv[4] == "validation" else "format"
    try:
        task = split_task(load_task(task_dir), split)
        # The rules first: a submission that breaks one gets no score.
        violations, facts = check(artifact, task.constraints)
        if violations:
            outcome = EvalOutcome(ok=False, violations=violations, details={"constraints": facts})
        else:
            evaluator = load_evaluator(task)
            if split == "format":
                outcome = evaluator.check_format(artifact)
            else:
                outcome = evaluator.evaluate(artifact, work_dir=work_dir)
            if facts:
                outcome.details["constraints"] = facts
        # A broken rule is said in the challenge's words where a checked rule names the check.
        outcome.violations = quote_rules(outcome.violations, task.challenge)
    except Exception as exc:
        traceback.print_exc()
        outcome = EvalOutcome(ok=False, error=f"evaluator failed: {type(exc).__name__}: {exc}")
    # How this process was confined, as run_evaluation set it up: recorded with the
    # outcome whatever the evaluator kind.
    outcome.details.setdefault("isolation", os.environ.get(ISOLATION_VAR) or "none")
    tmp = out.with_suffix(".tmp")
    tmp.write_text(outcome.model_dump_json(indent=2))
    tmp.replace(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
