"""MLAgentBench's layout (`MLAgentBench/benchmarks/<task>/`): `env/` is the workspace
the agent starts with, `scripts/` stays hidden (`research_problem.txt`, `eval.py`
with `get_score(submission_folder)`, optional `prepare.py`, `read_only_files.txt`,
`requirements.txt`). The score is `get_score` on the final workspace, graded
host-side on its frozen copy; success is MLAgentBench's: more than 10% better
than the baseline (the unchanged starter's score, measured and recorded)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from mlra.tasks.foreign.common import (
    expand_read_only,
    read_only_patterns,
    read_only_rule,
    read_text,
)
from mlra.tasks.foreign.known import KnownEvaluator, failure_values_in, recognize

DRIVER = Path(__file__).resolve().parent / "drivers" / "mlagentbench_score.py"

SUCCESS_IMPROVEMENT = 0.10


def failure_values(folder: Path) -> list[float]:
    """What this folder's eval.py returns when it fails: the benchmark's own task's, where
    recognized (tasks/foreign/known.py), else the numbers its get_score returns from an
    `except` block."""
    eval_py = folder / "scripts" / "eval.py"
    known = recognize(eval_py)
    return list(known.failure_values) if known is not None else failure_values_in(eval_py)


def grading_problem(folder: Path) -> str | None:
    """Why a run of this folder could not be graded, where that can be told without
    running anything: no `scripts/eval.py` (MLAgentBench's llama-inference,
    bibtex-generation), one that does not parse, or one with no `get_score`."""
    eval_py = folder / "scripts" / "eval.py"
    if not eval_py.is_file():
        return "no scripts/eval.py"
    try:
        tree = ast.parse(eval_py.read_bytes(), filename=str(eval_py))
    except SyntaxError as exc:
        return f"scripts/eval.py line {exc.lineno}: {exc.msg}"
    except (OSError, ValueError) as exc:
        return f"scripts/eval.py cannot be read: {exc}"
    for node in ast.walk(tree):  # any binding of the name, or a star import that may bind it
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "get_score":
            return None
        if (
            isinstance(node, ast.Name)
            and node.id == "get_score"
            and isinstance(node.ctx, ast.Store)
        ):
            return None
        if isinstance(node, ast.alias) and (node.asname or node.name) in ("get_score", "*"):
            return None
    return "scripts/eval.py defines no get_score"


def recognizes(folder: Path) -> bool:
    return (folder / "env").is_dir() and (folder / "scripts" / "research_problem.txt").is_file()


def spec_data(folder: Path, *, name: str) -> dict[str, Any]:
    """The task.toml this folder would have, as data. Which way its score improves, and
    whether it is a measurement, come from recognizing its evaluator by content; a
    folder whose evaluator is not one of the benchmark's own has its direction unknown."""
    scripts = folder / "scripts"
    problem = read_text(scripts / "research_problem.txt")
    read_only = expand_read_only(
        folder / "env", read_only_patterns(scripts / "read_only_files.txt")
    )
    cannot_grade = grading_problem(folder) or ""
    known = None if cannot_grade else recognize(scripts / "eval.py")
    rules = [
        "Work only in the workspace. The benchmark's hidden scripts are not yours to read.",
    ]
    if read_only:
        rules.append(read_only_rule(read_only))
    # The baseline is the unchanged starter: train.py run where there is one, else the
    # starter as it is (llama-inference's inference.py is timed by eval.py, not run here).
    steps = [{"title": "Run the unchanged train.py", "command": "python train.py", "timeout": "5h"}]
    if not (folder / "env" / "train.py").is_file():
        steps = [{"title": "Leave the starter unchanged (no train.py)", "command": "true"}]
    metric: dict[str, Any] = {
        "name": known.metric if known else "score",
        # Unknown: left unset (a written direction is a known one; tasks/sections.py).
        **({"higher_is_better": known.higher_is_better} if known else {}),
        "direction_known": known is not None,
        "baseline": None,  # measured by running the starter (tasks/foreign/loader.py)
        "success_rule": "relative_improvement",
        "success_improvement": SUCCESS_IMPROVEMENT,
        "self_reported": known.self_reported if known else "",
        "failure_values": []
        if cannot_grade
        else list(known.failure_values)
        if known
        else failure_values_in(scripts / "eval.py"),
        "score_range": list(known.score_range) if known and known.score_range else None,
    }
    return {
        "name": f"mlagentbench-{name}",  # not taken for a built-in task (babylm)
        "title": f"{name} (MLAgentBench)",
        "description": problem.splitlines()[0][:200] if problem else name,
        "prompt": {
            "task": problem or f"The MLAgentBench task {name}.",
            "result": "The workspace itself: `submit` with no path submits the whole "
            "workspace, and a frozen copy of it is what is graded.",
            "evaluation": _evaluation_text(cannot_grade, known),
            "rules": " ".join(rules),
        },
        "files": {"starter": ["env"], "hidden": ["scripts"], "read_only": read_only},
        "metric": metric,
        "evaluator": {
            "kind": "script",
            "artifact": ".",
            "timeout": "2h",
            "settings": {"script": str(DRIVER), "args": ["--scripts", "scripts"]},
            "cannot_grade": cannot_grade,
        },
        "resources": {"time_limit": "5h"},
        "baseline": {
            "description": "The unchanged starter (MLAgentBench's baseline): train.py as "
            "given, then the workspace submitted.",
            "steps": steps,
            "submit": ".",
        },
    }


def _evaluation_text(cannot_grade: str, known: KnownEvaluator | None) -> str:
    """The prompt's evaluation section: what grades the work, as far as it is known. A
    folder that cannot be graded says so (a run of it goes on only with `--ungraded`)
    rather than citing an evaluator it does not have."""
    if cannot_grade:
        return (
            f"This task folder cannot be graded ({cannot_grade}): the run is not scored. "
            "Leave the workspace holding your best result and describe it when you submit."
        )
    # `{direction}` is filled as the metric stands when the prompt is written (the
    # folder's mlra.toml or `--direction` may state what the evaluator does not).
    whose = "The benchmark's own" if known is not None else "The folder's own"
    return (
        f"{whose} hidden eval.py: get_score(<the frozen copy of your workspace>), run "
        "host-side after the run {direction}. Success, as MLAgentBench counts it, is a "
        "score more than 10% better than the baseline's (the unchanged starter's)."
    )
