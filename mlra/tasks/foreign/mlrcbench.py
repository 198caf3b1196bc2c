"""MLRC-Bench's layout (`MLAgentBench/benchmarks_base/<task>/`): `env/` holds `main.py`
(`python main.py -m METHOD -p dev|test`), `methods/` (the agent's methods, registered
in `methods/__init__.py`), `evaluation.py` and `constants.py`; `scripts/` stays hidden
(`research_problem.txt`, `background.txt`, `prepare.py`, `read_only_files.txt`,
`test_constants.py`, `test_data/`, `environment.yml`).

The dev phase is what the agent runs and what `validate` runs on a frozen copy; the
test phase runs once at the end, host-side, as the benchmark's launch.sh does it: the
read-only files restored, `scripts/test_data/*` put in `data/`, `test_constants.py`
over `constants.py`, then `main.py -m METHOD -p test`. The agent names METHOD in
`method_name.txt` (MLRC-Bench's own `my_method` without it). Scores are normalized
(agent - baseline) / (top human - baseline); success is more than 5% of that gap, as in the
benchmark's capability levels.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from mlra.tasks.foreign.common import (
    expand_read_only,
    first_existing,
    read_only_patterns,
    read_only_rule,
    read_text,
)

DRIVER = Path(__file__).resolve().parent / "drivers" / "mlrcbench_score.py"
SHIM = Path(__file__).resolve().parent / "shim" / "MLAgentBench"
"""A stand-in for the MLAgentBench package MLRC-Bench's main.py imports (`save_evals`,
its constants), without the LLM call its save_evals makes; copied into the workspace."""

DEFAULT_METHOD = "my_method"
METHOD_FILE = "method_name.txt"
SUCCESS_FRACTION = 0.05

PUBLISHED: dict[str, dict[str, float]] = {
    "llm-merging": {"dev": 0.727136371, "test": 0.4933333333, "top": 0.83},
    "backdoor-trigger-recovery": {"dev": 3.758409347, "test": 9.368725447, "top": 67.5732},
    "perception_temporal_action_loc": {"dev": 0.2370039379, "test": 0.1263531695, "top": 0.4859},
    "machine_unlearning": {"dev": 0.05389313916, "test": 0.06085605833, "top": 0.0984971060},
    "meta-learning": {"dev": 0.1821651453, "test": 0.1727912574, "top": 0.699},
    "product-recommendation": {"dev": 0.08035839265, "test": 0.08039049179, "top": 0.41208},
    "erasing_invisible_watermarks": {
        "dev": -1.00034643,
        "test": -1.001120229,
        "top": -0.04363443074502975,
    },
    "weather_forcast": {"top": 0.1014596},
}
"""Baseline (dev and test) and top human (test) scores as MLRC-Bench publishes them:
the baselines from `MLAgentBench/constants.py` (ALL_BASE_PERFORMANCE; the watermark
task's from its version at e2a714e, the one the results script's HUMAN_PERFORMANCE
goes with: a capability script's 0.2097 is another scale), the top human scores from
its results script (HUMAN_PERFORMANCE). weather_forcast has a published top and no
published baseline: its baseline is measured by running the unchanged starter, as is
every task's not here. Every score is higher-is-better (the benchmark normalizes
(score - baseline) / |baseline| and counts success above a share of that gap)."""

ONLINE_TEST_PHASE = {
    "llm-merging": "its test phase is scored by submitting to Kaggle (kaggle competitions "
    "submit), which needs the network and a Kaggle account",
    "machine_unlearning": "its test phase pushes a notebook to Kaggle and is scored there "
    "by a late submission made by hand",
}
"""Tasks whose test phase this machine cannot score: grading happens online."""

FAILURE_VALUES = {
    "llm-merging": [0.0],  # no public score came back from Kaggle
    "perception_temporal_action_loc": [0.0],  # its results file is missing
}
SCORE_RANGES = {
    "llm-merging": [0.0, 1.0],
    "backdoor-trigger-recovery": [0.0, 100.0],
    "perception_temporal_action_loc": [0.0, 1.0],
    "machine_unlearning": [0.0, 1.0],
    "meta-learning": [0.0, 1.0],
    "product-recommendation": [0.0, 1.0],
}
"""What each task's evaluation returns when it failed, and the scores it can take
(machine_unlearning's test phase returns a notebook's timestamp as a placeholder)."""

PUBLISHED_SOURCE = "MLRC-Bench's MLAgentBench/constants.py and HUMAN_PERFORMANCE"


def recognizes(folder: Path) -> bool:
    env = folder / "env"
    return (env / "main.py").is_file() and (env / "methods").is_dir()


def published_name(folder: Path, name: str) -> str:
    """The benchmark's name for the task: `TASK_NAME` in its env/main.py (read, never
    run), so a renamed folder keeps its published numbers and a folder that only shares
    a name gets none; the folder's name where main.py names none."""
    try:
        tree = ast.parse((folder / "env" / "main.py").read_bytes())
    except (OSError, SyntaxError, ValueError):
        return name
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "TASK_NAME" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and node.value.value in PUBLISHED
        ):
            return node.value.value
    return name


def _background(folder: Path) -> str:
    found = first_existing(folder / "scripts", "background.txt")
    found = found or first_existing(folder, "background.txt")
    found = found or first_existing(folder / "env", "background.txt")
    return read_text(found) if found else ""


def driver_args(phase: str, *, scripts: str = "scripts", env: str = "env") -> list[str]:
    return ["--phase", phase, "--scripts", scripts, "--env", env]


def spec_data(folder: Path, *, name: str) -> dict[str, Any]:
    scripts = folder / "scripts"
    problem = read_text(scripts / "research_problem.txt") or read_text(
        folder / "env" / "research_problem.txt"
    )
    patterns = read_only_patterns(scripts / "read_only_files.txt")
    read_only = expand_read_only(folder / "env", [*patterns, "MLAgentBench/*"])
    known = published_name(folder, name)
    published = PUBLISHED.get(known, {})
    test_baseline = published.get("test")  # else measured (tasks/foreign/loader.py)
    top = published.get("top")
    rules = [
        "Work only in the workspace; the benchmark's hidden scripts (test data, test "
        "constants) are not yours to read.",
    ]
    if read_only:
        rules.append(read_only_rule(read_only))
    return {
        "name": f"mlrcbench-{name}",  # not taken for a built-in task (llm-merging)
        "title": f"{name} (MLRC-Bench)",
        "description": problem.splitlines()[0][:200] if problem else name,
        "prompt": {
            "task": problem or f"The MLRC-Bench task {name}.",
            "result": "A method: implement it in methods/ (a class registered by name in "
            "methods/__init__.py's all_method_handlers; the starter's is my_method), write "
            f"its name alone into {METHOD_FILE} in the workspace (without that file, "
            f"{DEFAULT_METHOD} is graded), then submit (with no path: the whole workspace).",
            "evaluation": "Try a method on the dev set with `python main.py -m NAME -p dev` "
            "(the `validate` tool runs the same on a frozen copy of the workspace and names "
            f"the method from {METHOD_FILE}). After the run, the test phase runs host-side on "
            "the submitted copy: the read-only files restored, the hidden test data and test "
            "constants in place, `python main.py -m NAME -p test`. The score is normalized "
            "(yours - baseline) / (top human - baseline); success, as MLRC-Bench counts it, "
            "is more than 5% of that gap.",
            "rules": " ".join(rules),
            "notes": _background(folder),
        },
        "files": {"starter": ["env"], "hidden": ["scripts"], "read_only": read_only},
        "metric": {
            "name": "score",
            "higher_is_better": True,
            "baseline": test_baseline,
            "top": top,
            "success_rule": "gap_fraction",
            "success_fraction": SUCCESS_FRACTION,
            "success_strictly_above": True,
            "failure_values": FAILURE_VALUES.get(known, []),
            "score_range": SCORE_RANGES.get(known),
        },
        "evaluator": {
            "kind": "script",
            "artifact": ".",
            "timeout": "6h",
            "settings": {"script": str(DRIVER), "args": driver_args("test")},
            "cannot_grade": ONLINE_TEST_PHASE.get(known, ""),
        },
        "validation": {
            "settings": {"args": driver_args("dev")},
            "baseline": published.get("dev"),
        },
        "resources": {"time_limit": "5h"},
        "baseline": {
            "description": f"The unchanged starter's {DEFAULT_METHOD}, graded in the test "
            "phase (MLRC-Bench's baseline).",
            "steps": [
                {
                    "title": f"Name the starter's method ({DEFAULT_METHOD})",
                    "command": f"echo {DEFAULT_METHOD} > {METHOD_FILE}",
                    "timeout": "1m",
                }
            ],
            "submit": ".",
        },
    }
