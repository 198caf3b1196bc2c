"""A classifier whose outputs do not depend on the text (zeroed weights: every label's
logit is 0 for every text), graded on held-out texts whose labels are not balanced. Its
arg-max gave every tie to the first label in sorted order, so it scored the share of that
label, 0.75 here, and its score moved with the labels' names; ties are chance now (as
lm-eval's multiple-choice ties are, tasks/evaluators/choice_ties.py), counted in the
grade's metrics. Real tiny BERTs made here, graded in a fresh confined process."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from mlra.tasks.evaluators.base import run_evaluation
from mlra.tasks.evaluators.choice_ties import TIED_METRIC
from mlra.tasks.spec import TaskSpec, load_task
from tests.tasks.standins import standin_copy
from tests.tasks.test_offline_tasks import COMPRESS_LABELS, _bert
from tests.tasks.test_unscorable_weights import SMALL, _rewrite

ROWS = 12


def _skewed_task(root: Path, majority: str, minority: str) -> TaskSpec:
    """compress-budget with 12 held-out reviews of two of its labels, 9 of them `majority`."""
    folder = standin_copy("compress-budget", root)
    source = folder / "hidden" / "test.jsonl"
    rows = [json.loads(line) for line in source.read_text().splitlines()[:ROWS]]
    for i, row in enumerate(rows):
        row["label"] = majority if i % 4 else minority
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_task(folder)


def test_a_classifier_blind_to_the_text_scores_chance_whatever_the_label_order(
    tmp_path: Path,
) -> None:
    """Zeroed weights, every text tied: 0.5 between two labels (it scored 0.75 with the
    majority label first in sorted order, 0.25 with it last), whichever order
    config.id2label lists the labels in."""
    orders = [("film/negative", COMPRESS_LABELS), ("food/positive", COMPRESS_LABELS[::-1])]
    for majority, labels in orders:
        minority = "food/positive" if majority == "film/negative" else "film/negative"
        task = _skewed_task(tmp_path / majority, majority, minority)
        model = _bert(tmp_path / majority / "model", labels, **SMALL)
        _rewrite(model, {"": 0.0})
        outcome = asyncio.run(run_evaluation(task, model, tmp_path / majority / "eval"))
        assert outcome.ok and outcome.score == 0.5, (majority, outcome)
        assert outcome.metrics["labels/accuracy"] == 0.5
        assert outcome.metrics["labels/tied"] == ROWS
        assert outcome.metrics[TIED_METRIC] == ROWS
        assert outcome.details["tied_choices"] == {
            "labels": "12 of 12 held-out texts' top labels tied: "
            "counted as chance among the tied labels"
        }


@pytest.mark.slow
def test_a_classifier_without_ties_is_graded_by_its_arg_max(tmp_path: Path) -> None:
    """A randomly initialized model: no tie, so no tie is counted or said, and its score
    is a whole number of right answers."""
    task = _skewed_task(tmp_path / "task", "film/negative", "food/positive")
    model = _bert(tmp_path / "random", COMPRESS_LABELS, **SMALL)
    outcome = asyncio.run(run_evaluation(task, model, tmp_path / "eval"))
    assert outcome.ok and outcome.score is not None, outcome
    assert (outcome.score * ROWS).is_integer()
    assert TIED_METRIC not in outcome.metrics and "labels/tied" not in outcome.metrics
    assert "tied_choices" not in outcome.details
