"""A model whose outputs do not depend on the text, graded on BLiMP-shaped pairs (the right
sentence always the first choice): its two sentences of one token length tie, and lm-eval's
arg-max gave every tie to the first choice, 1.0 for a model that knows nothing. Ties are
chance now; a model without ties scores what lm-eval alone gives it. Real tiny models made
here, a stand-in BLiMP task of local pairs (no download)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlra.tasks.evaluators import lm_eval as lm_eval_evaluator
from mlra.tasks.evaluators.base import EvalOutcome
from mlra.tasks.evaluators.choice_ties import TIED_METRIC, TieWatch
from mlra.tasks.evaluators.lm_eval import LmEvalEvaluator
from mlra.tasks.grading import grade
from mlra.tasks.spec import TaskSpec, load_task
from tests.tasks.standins import llama
from tests.tasks.test_unscorable_weights import _blimp_shaped, _rewrite

PAIRS = 8


def _word_order_pairs(folder: Path) -> TaskSpec:
    """BLiMP-shaped pairs whose two sentences have the same tokens in another order (as
    many of BLiMP's do): one token length, so a text-blind model ties on every pair."""
    task = _blimp_shaped(folder)
    rows = [
        {"sentence_good": f"The cat {i} sat on the mat.", "sentence_bad": f"The cat {i} on the mat sat."}
        for i in range(PAIRS)
    ]  # fmt: skip
    data = task.root / "standin" / "blimp_pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_task(task.root)


@pytest.mark.slow
async def test_a_model_blind_to_the_text_scores_chance_on_tied_pairs(tmp_path: Path) -> None:
    """Zeroed weights: uniform logits, every pair tied. It took all 8 (1.0); now 0.5, and
    the grade's metrics count the tied pairs."""
    task = _word_order_pairs(tmp_path / "task")
    workspace = tmp_path / "workspace"
    llama(workspace / "submission")
    _rewrite(workspace / "submission", {"": 0.0})
    _, finished = await grade(task, workspace, None, tmp_path / "eval")
    assert finished.ok and finished.score == 0.5, finished
    assert finished.metrics[TIED_METRIC] == PAIRS


@contextlib.contextmanager
def _lm_eval_alone() -> Iterator[TieWatch]:
    yield TieWatch()


@pytest.mark.slow
def test_a_model_without_ties_scores_what_lm_eval_alone_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A randomly initialized model (context-dependent, float32): the same score and
    metrics to the last bit as lm-eval without the tie scoring, and no tie said."""
    task = _word_order_pairs(tmp_path / "task")
    model = llama(tmp_path / "random")
    evaluator = LmEvalEvaluator(task)
    graded: EvalOutcome = evaluator.evaluate(model, work_dir=tmp_path / "graded")
    monkeypatch.setattr(lm_eval_evaluator, "chance_for_ties", _lm_eval_alone)
    alone = evaluator.evaluate(model, work_dir=tmp_path / "alone")
    assert graded.ok and alone.ok, (graded, alone)
    assert graded.score == alone.score and graded.metrics == alone.metrics
    assert "tied_choices" not in graded.details and TIED_METRIC not in graded.metrics


def _choice_task(
    folder: Path, rows: list[dict[str, object]], choices: str, target: str | int
) -> Any:
    """A real lm-eval multiple-choice task over local rows, scored without a model: the
    log-likelihoods are given as a model's would be."""
    from lm_eval.api.task import ConfigurableTask

    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    metrics = [
        {"metric": m, "aggregation": "mean", "higher_is_better": True} for m in ("acc", "acc_norm")
    ]
    return ConfigurableTask(
        config={
            "task": "choices",
            "dataset_path": "json",
            "dataset_kwargs": {"data_files": {"test": str(data)}, "cache_dir": str(folder)},
            "test_split": "test",
            "output_type": "multiple_choice",
            "doc_to_text": "",
            "doc_to_choice": choices,
            "doc_to_target": target,
            "metric_list": [
                *metrics,
                {"metric": "f1", "aggregation": "f1", "higher_is_better": True},
            ],
        }
    )


def test_a_tie_at_the_top_counts_as_chance_among_the_tied_choices(tmp_path: Path) -> None:
    from mlra.tasks.evaluators.choice_ties import chance_for_ties

    pairs = _choice_task(
        tmp_path, [{"good": "The cat sat.", "bad": "The cat sit."}], "{{[good, bad]}}", 0
    )
    pair = next(iter(pairs.test_docs()))
    tied = [(-3.0, False), (-3.0, False)]
    assert pairs.process_results(pair, tied)["acc"] == 1.0  # lm-eval: the first choice
    three = _choice_task(
        tmp_path / "three",
        [{"choices": ["yes", "no", "maybe"], "answer": "no"}],
        "choices",
        "answer",  # the gold given as a choice's text
    )
    doc = next(iter(three.test_docs()))
    with chance_for_ties() as ties:
        said = pairs.process_results(pair, tied)
        assert said["acc"] == 0.5 and said["acc_norm"] == 0.5  # one length: both tie
        assert said["f1"][1] in (0, 1)
        assert pairs.process_results(pair, [(-3.0, False), (-4.0, False)])["acc"] == 1.0
        assert three.process_results(doc, [(-2.0, False)] * 3)["acc"] == pytest.approx(1 / 3)
        assert three.process_results(doc, [(-2.0, False), (-2.0, False), (-5.0, False)])[
            "acc"
        ] == pytest.approx(1 / 2)
        assert three.process_results(doc, [(-2.0, False), (-5.0, False), (-2.0, False)])[
            "acc"
        ] == pytest.approx(0.0)
        # "yes" and "no" tie; per character "yes" is ahead (-2/3 > -2/2): acc_norm had no
        # tie and keeps lm-eval's value, not a half
        untied_norm = three.process_results(doc, [(-2.0, False), (-2.0, False), (-9.0, False)])
        assert untied_norm["acc"] == 0.5 and untied_norm["acc_norm"] == 0.0
    assert ties.documents == {"choices": 6} and ties.tied == {"choices": 5}
    outside = pairs.process_results(pair, [(-3.0, False), (-4.0, False)])
    assert outside == pairs.process_results(pair, [(-3.0, False), (-4.0, False)])
