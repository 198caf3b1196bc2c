"""An evaluator added as docs/contributing.md says: its class and one line of
tasks/evaluators/kinds.py, and a task file naming its kind loads, says which packages
it needs, and is graded by it in the grading process's own code; a kind the table does
not have is the one line it was before the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlra.tasks.evaluators import runner
from mlra.tasks.evaluators.base import EvalOutcome, Evaluator, load_evaluator
from mlra.tasks.evaluators.kinds import EVALUATORS, EvaluatorKind
from mlra.tasks.readiness import missing_packages
from mlra.tasks.spec import TaskError, load_task
from tests.conftest import answer_copy


class WordCount(Evaluator):
    """The recipe's example: the score is how many of the task's words the answer has."""

    def evaluate(self, artifact: Path, *, work_dir: Path) -> EvalOutcome:
        wanted = set(self.task.evaluator.settings["words"])
        found = wanted & set(artifact.read_text(encoding="utf-8").split())
        return EvalOutcome(ok=True, score=len(found) / len(wanted))


def _task(answer_task: Path, tmp_path: Path, kind: str) -> Path:
    old = 'kind = "script"\nartifact = "answer.txt"\ntimeout = "1m"\nsettings = { script = "hidden/check.py" }'
    new = f'kind = "{kind}"\nartifact = "answer.txt"\nsettings = {{ words = ["four", "two"] }}'
    return answer_copy(tmp_path / "task", (old, new), source=answer_task)


def test_an_evaluator_added_by_one_line_grades_a_task_naming_it(
    answer_task: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        EVALUATORS, "word-count", EvaluatorKind(f"{__name__}:WordCount", ("mlra_no_such_pkg",))
    )
    folder = _task(answer_task, tmp_path, "word-count")
    task = load_task(folder)
    assert task.evaluator.kind == "word-count"
    assert isinstance(load_evaluator(task), WordCount)
    assert missing_packages(task) == ["mlra_no_such_pkg"]

    artifact = tmp_path / "answer.txt"
    artifact.write_text("two plus two is four\n", encoding="utf-8")
    work = tmp_path / "grading"
    work.mkdir()
    out = work / "evaluation.json"
    # What `python -m mlra.tasks.evaluators.runner` does in the grading process.
    assert runner.main([str(folder), str(artifact), str(out), str(work)]) == 0
    outcome = EvalOutcome.model_validate_json(out.read_text(encoding="utf-8"))
    assert outcome.ok and outcome.score == 1.0, outcome


def test_an_evaluator_kind_the_table_lacks_is_one_line(answer_task: Path, tmp_path: Path) -> None:
    folder = _task(answer_task, tmp_path, "word-count")
    with pytest.raises(TaskError) as info:
        load_task(folder)
    assert str(info.value) == (
        f"{folder / 'task.toml'}: field evaluator.kind: "
        "Input should be 'classifier', 'lm-eval' or 'script'"
    )
