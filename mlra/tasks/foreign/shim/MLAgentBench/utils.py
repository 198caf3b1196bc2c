"""`save_evals` as MLRC-Bench's main.py calls it: each phase's score appended to
`output/idea_evals.json`, where mlra's grader reads it back."""

import json
import os
import time
from typing import Any

from .constants import ALL_BASE_PERFORMANCE


def save_evals(
    task_name: str,
    method_name: str,
    method_class: Any,
    base_class: Any,
    score: float,
    phase: str,
    runtime: float,
    **_: Any,
) -> None:
    os.makedirs("output", exist_ok=True)
    path = os.path.join("output", "idea_evals.json")
    try:
        with open(path) as reader:
            evals = json.load(reader)
    except (OSError, ValueError):
        evals = {"idea": None, "implementations": []}
    base = ALL_BASE_PERFORMANCE.get(task_name, {}).get(phase)
    entry = {
        "task_name": task_name,
        "method_name": method_name,
        "phase": phase,
        "performance": score,
        "improvement_perc": 100 * (score - base) / abs(base) if base else None,
        "runtime": runtime,
        "time": time.time(),
    }
    evals["implementations"].append(entry)
    with open(path, "w") as writer:
        json.dump(evals, writer, indent=2)
    print(f"{method_name} scores {score} on the {phase} set")
