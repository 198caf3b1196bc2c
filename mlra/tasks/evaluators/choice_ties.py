"""Ties at the top of a multiple-choice document's choices, scored as chance.

lm-eval scores a multiple-choice document by the arg-max of its choices'
log-likelihoods, and numpy's arg-max gives a tie to the first choice. Where the right
answer is always first, as in BLiMP (lm-eval's `blimp` lists the grammatical sentence
first, `doc_to_target: 0`), a model whose outputs do not depend on the text (zeroed
weights, constant logits: an untrained model, a worn-out agent's degenerate checkpoint)
gives two sentences of the same token length exactly the same log-likelihood and is
counted right on every such pair: 1.0 on a benchmark where chance is 0.5, for a model that
knows nothing. The benchmark trusts the scores it is given, so mlra grades the tie as
what it is, a guess among the tied choices: a document whose top choices tie counts
1/k of its accuracy for each right answer among the k tied (the expected accuracy of a
fair coin among them), and the grade's metrics (`tied_documents`) and details count
the tied documents.

Why chance and not "wrong", nor refusing the model: a real model can tie honestly (the
same sentence twice in a dataset; a checkpoint graded in its own bfloat16, whose sums
keep 8 bits, ties now and then), and it should get what a guess gets there, no less; an
untrained model is graded at chance elsewhere in mlra (docs/tasks.md), not refused. A
model with no tie (any trained or randomly initialized float32 model, in practice)
gets exactly lm-eval's numbers: the scoring runs unchanged and only a tied document's
metrics are replaced.

How: each tied choice in turn is made the only top one (the other tied choices set far
below it) and lm-eval's own scoring runs on that, so the gold answer is read as lm-eval
reads it (an index, a choice's text, a list of them); the tied runs' accuracies are
averaged. Each kind of accuracy ties on its own values: `acc` on the log-likelihoods,
`acc_norm` on them per character, `acc_bytes` per byte. F1 and MCC take a prediction,
not a fraction: a tied document's prediction is one of the tied choices picked by a hash
of the document (fair, and the same on every run) instead of the first. A task with its
own `process_results` (ReCoRD) scores as it says; no task mlra grades has its score there.

The classifier evaluator's arg-max over a text's label logits ties the same way (a model
with zeroed weights gives every label the logit 0 and was counted right wherever the
first label in sorted order was the answer): it takes `chance_of_right` per text and
counts its ties in a `TieWatch` of its own.
"""

from __future__ import annotations

import contextlib
import json
import math
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

LOWERED = -1e30
"""A tied choice's log-likelihood while another tied choice is made the top one:
finite, and below any a model gives (the NaN and infinite ones are refused)."""
CHANCE_METRICS = {"acc": "raw", "acc_norm": "chars", "acc_bytes": "bytes"}
"""Each accuracy lm-eval computes, and the values its arg-max ties on (see _views)."""
PICKED_METRICS = ("f1", "mcc")
SCORING_METHOD = "process_results"
"""lm-eval's method that turns one document's log-likelihoods into its metrics."""
TIED_METRIC = "tied_documents"
"""The grade's metric counting the documents whose top choices tied (all tasks): absent
when none did."""


@dataclass
class TieWatch:
    """Multiple-choice documents scored in this process, per task, and how many had a
    tie at the top of their choices."""

    documents: dict[str, int] = field(default_factory=dict)
    tied: dict[str, int] = field(default_factory=dict)
    unit: str = "documents"
    """What is scored, in the summary's words ("held-out texts" for a classifier)."""
    choices: str = "choices"
    """What the arg-max picks among ("labels" for a classifier)."""

    def summary(self) -> dict[str, str]:
        """Each task with a tie, in words, for the grade's details."""
        return {
            task: f"{self.tied[task]} of {self.documents[task]} {self.unit}' top {self.choices} "
            f"tied: counted as chance among the tied {self.choices}"
            for task in sorted(self.tied)
        }


def _views(lls: Sequence[float], choices: Sequence[str]) -> dict[str, list[float]]:
    """What each accuracy takes the arg-max of, as lm-eval computes it."""
    return {
        "raw": list(lls),
        "chars": [ll / max(len(c), 1) for ll, c in zip(lls, choices, strict=True)],
        "bytes": [ll / max(len(c.encode("utf-8")), 1) for ll, c in zip(lls, choices, strict=True)],
    }


def _tied(values: Sequence[float]) -> list[int]:
    top = max(values)
    return [i for i, v in enumerate(values) if v == top]


def chance_of_right(values: Sequence[float], right: int) -> tuple[float, int]:
    """The accuracy of an arg-max over finite `values` whose answer is `right`, a tie at
    the top counted as a fair pick among the tied (1/k where the answer is one of k);
    and how many tied there (1: no tie)."""
    top = _tied(values)
    return (1 / len(top) if right in top else 0.0), len(top)


def score_ties(
    score: Callable[[list[Any]], dict[str, Any]],
    results: Sequence[Any],
    choices: Sequence[str],
    doc: Any,
) -> tuple[dict[str, Any], bool]:
    """lm-eval's metrics for one document, `score(results)`, with its ties scored as
    chance; and whether the top of any accuracy's values tied."""
    scored = score(list(results))
    k = len(choices)
    pairs = [tuple(r) if isinstance(r, (tuple, list)) else (r,) for r in results]
    lls = [float(p[0]) for p in pairs[:k]]
    if k < 2 or len(lls) < k or not all(math.isfinite(ll) for ll in lls):
        return scored, False  # refused after lm-eval (weight_checks.watch_likelihoods)
    views = _views(lls, choices)
    any_tie = False
    for view, values in views.items():
        top = _tied(values)
        names = [m for m, v in CHANCE_METRICS.items() if v == view and m in scored]
        if view == "raw":
            names += [m for m in PICKED_METRICS if m in scored]
        if len(top) < 2 or not names:
            continue
        any_tie = True
        runs = []
        for winner in top:
            lowered = [
                (LOWERED, *p[1:]) if i in top and i != winner else p for i, p in enumerate(pairs)
            ]
            runs.append(score([lowered_result(r, results) for r in lowered]))
        for name in names:
            if name in CHANCE_METRICS:
                scored[name] = sum(float(run[name]) for run in runs) / len(runs)
            else:
                key = json.dumps(doc, sort_keys=True, default=str).encode()
                scored[name] = runs[zlib.crc32(key) % len(runs)][name]
    return scored, any_tie


def lowered_result(pair: tuple[Any, ...], like: Sequence[Any]) -> Any:
    """A result in the form lm-eval gave them: (log-likelihood, is_greedy) or a bare number."""
    return pair if like and isinstance(like[0], (tuple, list)) else pair[0]


@contextlib.contextmanager
def chance_for_ties() -> Iterator[TieWatch]:
    """lm-eval's multiple-choice scoring, with ties as chance, while the block runs:
    ConfigurableTask (every YAML task) and MultipleChoiceTask (the older Python ones)."""
    from lm_eval.api.task import ConfigurableTask, MultipleChoiceTask

    watch = TieWatch()
    originals = {
        ConfigurableTask: getattr(ConfigurableTask, SCORING_METHOD),
        MultipleChoiceTask: getattr(MultipleChoiceTask, SCORING_METHOD),
    }

    def wrap(original: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def process_results(self: Any, doc: Any, results: Any) -> dict[str, Any]:
            if isinstance(self, ConfigurableTask):
                if self.OUTPUT_TYPE != "multiple_choice" or callable(self.config.process_results):
                    return original(self, doc, results)
                choices = [str(c) for c in self.doc_to_choice(doc)]
            else:
                choices = [str(c) for c in doc["choices"]]
            scored, tie = score_ties(lambda r: original(self, doc, r), results, choices, doc)
            name = str(getattr(self.config, "task", None) or type(self).__name__)
            watch.documents[name] = watch.documents.get(name, 0) + 1
            if tie:
                watch.tied[name] = watch.tied.get(name, 0) + 1
            return scored

        return process_results

    for cls, original in originals.items():
        setattr(cls, SCORING_METHOD, wrap(original))
    try:
        yield watch
    finally:
        for cls, original in originals.items():
            setattr(cls, SCORING_METHOD, original)
