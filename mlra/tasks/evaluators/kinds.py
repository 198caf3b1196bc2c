"""The evaluator kinds a task file may name (`[evaluator] kind`), one line each.

Everything that knows the kinds reads this table: what a task file may say
(tasks/sections.py: any other kind is the one line `field evaluator.kind: Input should
be ...`), which class grades it (tasks/evaluators/base.py: `load_evaluator`, in the
grading process) and which packages this machine must have to grade it
(tasks/readiness.py). Adding an evaluator is its own module and one line here
(docs/contributing.md). Plain data: loading a task imports no evaluator.
"""

from __future__ import annotations

from typing import NamedTuple

from mlra.lazy_load import one_of


class EvaluatorKind(NamedTuple):
    """One kind: its class, and what it needs installed."""

    evaluator: str
    """The `Evaluator` subclass (tasks/evaluators/base.py) as "module:Class", made with
    `Class(task)` in the grading process."""
    packages: tuple[str, ...] = ()
    """Modules the grading needs importable here: `mlra tasks` says which are missing
    (tasks/readiness.py), before a run that could not be graded."""


EVALUATORS: dict[str, EvaluatorKind] = {
    "classifier": EvaluatorKind("mlra.tasks.evaluators.classifier:ClassifierEvaluator"),
    "lm-eval": EvaluatorKind(
        "mlra.tasks.evaluators.lm_eval:LmEvalEvaluator", ("torch", "transformers", "lm_eval")
    ),
    "script": EvaluatorKind("mlra.tasks.evaluators.script:ScriptEvaluator"),
}


def evaluator_kind(value: object) -> str:
    """A pydantic validator (before): a kind of the table, or pydantic's own refusal."""
    return one_of(value, tuple(EVALUATORS))
