"""The classifier evaluator: accuracy of a submitted sequence classifier on held-out
labelled texts, shared by every task whose result is such a model (classify-finetune,
compress-budget, merge-models).

Settings: `tests`, a table of `NAME = "hidden/FILE.jsonl"`, each file holding
`{"text", "label"}` rows. The submission is a folder that
`AutoModelForSequenceClassification` and `AutoTokenizer` load (safetensors
weights, no remote code). Its `config.id2label` must name every label of a test
file; a prediction for that file is the arg-max over those labels' logits only,
so one model can carry several label sets (a merged model). The score is the mean
accuracy over the test files; each file's accuracy is also reported. A text whose top
logits tie (a model with zeroed weights ties every label, and arg-max gave the tie to
the first label in sorted order, scoring the data's label mix rather than the model)
counts as chance among the tied labels, as lm-eval's multiple-choice ties do
(choice_ties.py); `FILE/tied` and `tied_documents` count them, and the details say so.

It runs inside the evaluation process, which `run_evaluation` already confines.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mlra.tasks.evaluators.base import EvalOutcome, Evaluator
from mlra.tasks.evaluators.choice_ties import TIED_METRIC, TieWatch, chance_of_right
from mlra.tasks.evaluators.weight_checks import load_failure, non_finite_weights

BATCH = 256


class ClassifierEvaluator(Evaluator):
    def check_format(self, artifact: Path) -> EvalOutcome:
        """A model folder with a config naming its labels, and finite weights in
        safetensors (the classifier tasks' rules check the rest)."""
        if not artifact.is_dir():
            return _refused(
                f"the submission must be a model folder; {artifact.name} is not a folder"
            )
        try:
            config = json.loads((artifact / "config.json").read_text(encoding="utf-8"))
        except OSError:
            return _refused(
                f"{artifact.name} has no config.json (save the model with save_pretrained)"
            )
        except ValueError as exc:
            return _refused(f"config.json is not valid JSON: {exc}")
        if not isinstance(config, dict) or not config.get("id2label"):
            return _refused("config.json names no labels (config.id2label)")
        if not list(artifact.glob("*.safetensors")):
            return _refused(f"{artifact.name} holds no safetensors weights")
        non_finite = non_finite_weights(artifact)
        return _refused(non_finite) if non_finite else EvalOutcome(ok=True)

    def evaluate(self, artifact: Path, *, work_dir: Path) -> EvalOutcome:
        tests = self.task.evaluator.settings.get("tests")
        if not isinstance(tests, dict) or not tests:
            return EvalOutcome(ok=False, error="task error: evaluator.settings.tests is not set")
        if not artifact.is_dir():
            return _refused(
                f"the submission must be a model folder; {artifact.name} is not a folder"
            )
        if not (artifact / "config.json").is_file():
            return _refused(
                f"{artifact.name} has no config.json (save the model with save_pretrained)"
            )
        # The label sets are checked from config.json before torch is loaded, so a model
        # that cannot be scored is refused in a moment rather than after seconds of imports.
        test_rows: dict[str, list[dict[str, Any]]] = {}
        for name, rel in tests.items():
            text = (self.task.root / str(rel)).read_text()
            test_rows[name] = [json.loads(line) for line in text.splitlines() if line.strip()]
        try:
            declared = json.loads((artifact / "config.json").read_text(encoding="utf-8"))
        except ValueError as exc:
            # Said here: the tokenizer, loaded first, would be blamed for it.
            return _refused(f"config.json is not valid JSON: {exc}")
        except OSError:
            declared = None
        id2label = (declared.get("id2label") or {}) if isinstance(declared, dict) else None
        # Anything but a table: the model's loader says what is wrong with it.
        declared_names = {str(v) for v in id2label.values()} if isinstance(id2label, dict) else None
        if declared_names is not None:
            for name, rows in test_rows.items():
                refusal = _missing_label(name, rows, declared_names)
                if refusal is not None:
                    return refusal
        non_finite = non_finite_weights(artifact)
        if non_finite:
            return _refused(non_finite)
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import torch
        import transformers

        transformers.logging.set_verbosity_error()
        torch.set_num_threads(2)
        try:
            tok: Any = transformers.AutoTokenizer.from_pretrained(
                str(artifact), trust_remote_code=False, local_files_only=True
            )
        except Exception as exc:
            return _refused(f"the submitted tokenizer cannot be loaded: {_short(exc)}")
        try:
            model: Any = transformers.AutoModelForSequenceClassification.from_pretrained(
                str(artifact), trust_remote_code=False, use_safetensors=True, local_files_only=True
            )
        except Exception as exc:
            why = load_failure(exc, artifact, transformers.AutoModelForSequenceClassification)
            return _refused(f"the submitted model cannot be loaded: {why}")
        model.eval()
        names = {str(v): int(k) for k, v in model.config.id2label.items()}
        embeddings = int(model.get_input_embeddings().num_embeddings)
        positions = getattr(model.config, "max_position_embeddings", None)

        metrics: dict[str, float] = {}
        accuracies: list[float] = []
        ties = TieWatch(unit="held-out texts", choices="labels")
        for name, rows in test_rows.items():
            refusal = _missing_label(name, rows, set(names))
            if refusal is not None:
                return refusal
            labels = sorted({r["label"] for r in rows})
            place = {label: i for i, label in enumerate(labels)}
            ids = torch.tensor([names[label] for label in labels])
            correct = 0.0
            tied = 0
            non_finite = 0
            with torch.no_grad():
                for i in range(0, len(rows), BATCH):
                    batch = rows[i : i + BATCH]
                    enc = tok(
                        [r["text"] for r in batch],
                        padding=True,
                        truncation=True,
                        return_tensors="pt",
                    )
                    unfit = _tokenizer_misfit(enc["input_ids"], embeddings, positions)
                    if unfit is not None:
                        return _refused(unfit)
                    try:
                        logits = model(**enc).logits[:, ids]
                    except Exception as exc:  # the model's fault, not the grader's
                        return _refused(
                            f"the submitted model fails on held-out texts: {_short(exc)}"
                        )
                    # arg-max over NaN is the first label: a prediction of nothing.
                    non_finite += int((~torch.isfinite(logits).all(-1)).sum())
                    if non_finite:
                        continue
                    for values, r in zip(logits.tolist(), batch, strict=True):
                        right, among = chance_of_right(values, place[r["label"]])
                        correct += right
                        tied += among > 1
            if non_finite:
                return _refused(
                    f"the model's outputs are NaN or infinite for {non_finite} of the "
                    f"{len(rows)} held-out texts ({name}): it predicts nothing there to score"
                )
            accuracy = correct / len(rows)
            metrics[f"{name}/accuracy"] = accuracy
            metrics[f"{name}/examples"] = float(len(rows))
            ties.documents[name] = len(rows)
            if tied:
                metrics[f"{name}/tied"] = float(tied)
                ties.tied[name] = tied
            accuracies.append(accuracy)
        metrics["parameters"] = float(sum(p.numel() for p in model.parameters()))
        details: dict[str, object] = {}
        if ties.tied:
            metrics[TIED_METRIC] = float(sum(ties.tied.values()))
            details["tied_choices"] = ties.summary()
        return EvalOutcome(
            ok=True, score=sum(accuracies) / len(accuracies), metrics=metrics, details=details
        )


def _tokenizer_misfit(input_ids: Any, embeddings: int, positions: int | None) -> str | None:
    """Why the submitted tokenizer does not belong with the model, said before the model
    runs: torch's own answer ("The expanded size of the tensor (81) must match...") read
    as the grader's failure."""
    highest = int(input_ids.max())
    if highest >= embeddings:
        return (
            f"the submitted tokenizer gives token ids up to {highest}, and the model has "
            f"{embeddings} embeddings: save the tokenizer the model was trained with"
        )
    width = int(input_ids.shape[1])
    if isinstance(positions, int) and width > positions:
        return (
            f"the submitted tokenizer gives held-out texts of up to {width} tokens, and the model "
            f"takes at most {positions} positions: save the tokenizer the model was trained "
            "with, or set its model_max_length"
        )
    return None


def _missing_label(name: str, rows: list[dict[str, Any]], names: set[str]) -> EvalOutcome | None:
    labels = sorted({r["label"] for r in rows})
    missing = [label for label in labels if label not in names]
    if not missing:
        return None
    return _refused(
        f"config.id2label has no label {missing[0]!r} (it has {sorted(names)}); "
        f"the held-out texts ({name}) are labelled {labels}"
    )


def _refused(reason: str) -> EvalOutcome:
    """A submission that cannot be scored, said as the old per-task scripts said it."""
    return EvalOutcome(ok=False, error=f"evaluation error: {reason}")


def _short(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"
