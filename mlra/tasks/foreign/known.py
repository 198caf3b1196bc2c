"""MLAgentBench's own tasks, recognized by the content of their evaluator, not by the
folder's name: a renamed copy of house-price is still an error metric, and a folder
that merely shares a name with one of them is not. What the benchmark's paper and
code say of each evaluator (its metric, which way it improves, the scores it can
take, the value it returns when it fails) is kept here by the fingerprint of its
`scripts/eval.py`; an evaluator not here is graded as it is, with its direction
unknown until the user states it (tasks/foreign/overlay.py).

The fingerprints cover every version of each eval.py in MLAgentBench's history
(snap-stanford/MLAgentBench, 2023-08 to 2024-04); comments, blank lines and
indentation do not change one.
"""

from __future__ import annotations

import ast
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class KnownEvaluator:
    task: str
    """The benchmark's name for the task."""
    metric: str
    higher_is_better: bool
    score_range: tuple[float, float] | None = None
    self_reported: str = ""
    """Why the score is the workspace's own report, not a measurement; "" for a measurement."""
    failure_values: tuple[float, ...] = field(default=())


_ACCURACY = (0.0, 1.0)
_NONNEGATIVE = (0.0, math.inf)

_VECTORIZATION = KnownEvaluator(
    task="vectorization",
    metric="run time (s)",
    higher_is_better=False,
    score_range=_NONNEGATIVE,
    self_reported="its eval.py returns the run time that the workspace's own train.py "
    "wrote into submission.csv, so the score is the agent's report, not a measurement",
    failure_values=(1e10,),
)

MLAGENTBENCH: dict[str, KnownEvaluator] = {
    "1f08428a0e593238": KnownEvaluator("CLRS", "test score", True, _ACCURACY),
    "244c47a16f5f1a59": KnownEvaluator(
        "amp-parkinsons-disease-progression-prediction", "SMAPE", False, (0.0, 200.0)
    ),
    "3c3a9ba6dca6d454": KnownEvaluator("babylm", "perplexity", False, (1.0, math.inf)),
    "e3890b90a5d2e559": KnownEvaluator("cifar10", "accuracy", True, _ACCURACY),
    "550cc56b89601570": KnownEvaluator("fathomnet", "score", True, _ACCURACY),
    "8e1289029a5ed5af": KnownEvaluator("feedback", "MCRMSE", False, _NONNEGATIVE),
    "e592e068e8e4d2df": KnownEvaluator("house-price", "mean absolute error", False, _NONNEGATIVE),
    "ebd77ba9ac29394f": KnownEvaluator("house-price", "mean absolute error", False, _NONNEGATIVE),
    "5b1dc27ae8433fa0": KnownEvaluator("identify-contrails", "dice", True, _ACCURACY),
    "855568e0a546e670": KnownEvaluator("imdb", "accuracy", True, _ACCURACY),
    "c6394f6160eaaf8b": KnownEvaluator("ogbn-arxiv", "accuracy", True, _ACCURACY),
    "0269145d668a97e2": KnownEvaluator("spaceship-titanic", "accuracy", True, _ACCURACY),
    "b28df2bca398b34a": KnownEvaluator("spaceship-titanic", "accuracy", True, _ACCURACY),
    "c52cc64a76810f50": _VECTORIZATION,
    "81040d7b12fe8eed": _VECTORIZATION,
    "d2b29dec3c764e83": _VECTORIZATION,
}
"""Fingerprints (tasks/foreign/known.py `fingerprint`) of MLAgentBench's eval.py files."""


def fingerprint(source: bytes) -> str:
    """The evaluator's content, as far as it decides anything: every line stripped, blank
    and comment-only lines dropped, hashed (16 hex digits)."""
    text = source.decode("utf-8", errors="replace")
    lines = [line.strip() for line in text.splitlines()]
    kept = [line for line in lines if line and not line.startswith("#")]
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()[:16]


def recognize(eval_py: Path) -> KnownEvaluator | None:
    try:
        return MLAGENTBENCH.get(fingerprint(eval_py.read_bytes()))
    except OSError:
        return None


def failure_values_in(eval_py: Path) -> list[float]:
    """The numbers `get_score` returns from an `except` block: what it gives when it
    failed (vectorization's `except: return 1e10`), read from the code, never run."""
    try:
        tree = ast.parse(eval_py.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return []
    found: list[float] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.FunctionDef) and node.name == "get_score"):
            continue
        for handler in ast.walk(node):
            if not isinstance(handler, ast.ExceptHandler):
                continue
            for inner in ast.walk(handler):
                if isinstance(inner, ast.Return) and inner.value is not None:
                    value = _number(inner.value)
                    if value is not None and value not in found:
                        found.append(value)
    return found


def _number(node: ast.expr) -> float | None:
    value = node.value if isinstance(node, ast.Constant) else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _number(node.operand)
        if inner is not None:
            return -inner if isinstance(node.op, ast.USub) else inner
    return None
