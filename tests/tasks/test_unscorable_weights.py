"""Models a worn-out agent leaves behind, graded as the tasks grade them (a fresh
process, the rules first): weights a diverged training run saved as NaN, finite weights
whose outputs overflow, a checkpoint whose shapes disagree with its config, a config
that is not JSON, another model's tokenizer. Each gets no score and a reason that names the fault, never a number:
a NaN language model scored 1.0 on BLiMP-shaped pairs (the tie of two NaN likelihoods
goes to the first choice, the grammatical one), a NaN classifier the share of its first
label.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from mlra.tasks.evaluators.base import EvalOutcome, run_evaluation
from mlra.tasks.grading import grade
from mlra.tasks.spec import BUILTIN_TASKS_DIR, TaskSpec, load_task
from tests.tasks.standins import bpe_tokenizer, llama, standin_copy
from tests.tasks.test_offline_tasks import COMPRESS_LABELS, _bert

SMALL = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)


def _evaluate(task: TaskSpec, artifact: Path, work: Path) -> EvalOutcome:
    return asyncio.run(run_evaluation(task, artifact, work))


def _rewrite(model: Path, change: dict[str, float]) -> None:
    """Set every weight whose name holds a key of `change` to that value."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(str(model / "model.safetensors"))
    for name, tensor in weights.items():
        for part, value in change.items():
            if part in name and tensor.is_floating_point():
                weights[name] = torch.full_like(tensor, value)
    save_file(weights, str(model / "model.safetensors"), metadata={"format": "pt"})


def _no_score(outcome: EvalOutcome) -> str:
    assert not outcome.ok and outcome.score is None and outcome.violations == [], outcome
    assert outcome.error and "Traceback" not in outcome.error
    return outcome.error


def test_a_classifier_with_nan_weights_gets_no_score(tmp_path: Path) -> None:
    task = load_task(BUILTIN_TASKS_DIR / "compress-budget")
    model = _bert(tmp_path / "nan", COMPRESS_LABELS, **SMALL)
    _rewrite(model, {"": float("nan")})
    error = _no_score(_evaluate(task, model, tmp_path / "eval"))
    assert "the model's weights hold NaN or infinite values" in error
    assert "did its training diverge?" in error


@pytest.mark.slow
def test_a_classifier_whose_outputs_overflow_gets_no_score(tmp_path: Path) -> None:
    """Finite weights, every logit infinite: arg-max would still have picked a label.
    The embeddings' LayerNorm scaled and shifted by 3.4e38 (just under float32's
    largest) overflows for every text, whatever the random weights: each token's
    normalized vector has a value above 0.0008 (its mean is 0), and the inf spreads
    to every position through attention. (Scaling the classifier alone left texts
    whose pooled sum kept the logits finite, on some initialisations.)"""
    task = load_task(BUILTIN_TASKS_DIR / "compress-budget")
    model = _bert(tmp_path / "overflow", COMPRESS_LABELS, **SMALL)
    _rewrite(model, {"embeddings.LayerNorm.weight": 3.4e38, "embeddings.LayerNorm.bias": 3.4e38})
    error = _no_score(_evaluate(task, model, tmp_path / "eval"))
    assert "the model's outputs are NaN or infinite for 2000 of the 2000 held-out texts" in error


def test_a_checkpoint_that_does_not_fit_its_config_names_the_tensor(tmp_path: Path) -> None:
    """transformers says only 'look at the above report', a report the grader's log
    level hides."""
    import torch
    from safetensors.torch import load_file, save_file

    task = load_task(BUILTIN_TASKS_DIR / "compress-budget")
    model = _bert(tmp_path / "shape", COMPRESS_LABELS, **SMALL)
    weights = load_file(str(model / "model.safetensors"))
    weights["classifier.weight"] = torch.zeros(3, 32)
    save_file(weights, str(model / "model.safetensors"), metadata={"format": "pt"})
    error = _no_score(_evaluate(task, model, tmp_path / "eval"))
    assert "its weights do not fit the architecture its config.json describes" in error
    assert "classifier.weight: [3, 32] in the weights, [8, 32] by config.json" in error
    assert "above report" not in error


def test_a_config_that_is_not_json_is_said_to_be_so(tmp_path: Path) -> None:
    """Not the tokenizer's fault, which the first load to fail used to blame."""
    task = load_task(BUILTIN_TASKS_DIR / "compress-budget")
    model = _bert(tmp_path / "garbled", COMPRESS_LABELS, **SMALL)
    (model / "config.json").write_text("{")
    error = _no_score(_evaluate(task, model, tmp_path / "eval"))
    assert error.startswith("evaluation error: config.json is not valid JSON")
    assert "tokenizer" not in error


def _blimp_shaped(folder: Path) -> TaskSpec:
    """babylm, its BLiMP replaced by pairs laid out as lm-eval's `blimp` lays them out:
    the grammatical sentence always the first choice (`doc_to_target: 0`)."""
    task_dir = standin_copy("babylm", folder, evaluator_lines='include = "standin"\n')
    standin = task_dir / "standin"
    standin.mkdir()
    rows = [
        {"sentence_good": f"The cat {i} sits on the mat.", "sentence_bad": f"The cat {i} sit on the mat."}
        for i in range(8)
    ]  # fmt: skip
    (standin / "blimp_pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (standin / "blimp_pairs.yaml").write_text(
        "task: blimp_pairs\ndataset_path: json\n"
        "dataset_kwargs:\n  data_files:\n    train: blimp_pairs.jsonl\n"
        "output_type: multiple_choice\nvalidation_split: train\ndoc_to_text: ''\n"
        "doc_to_target: 0\ndoc_to_choice: '{{[sentence_good, sentence_bad]}}'\n"
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
        "metadata:\n  version: 1.0\n"
    )
    toml = task_dir / "task.toml"
    text = toml.read_text()
    text = text.replace('tasks = ["blimp"]', 'tasks = ["blimp_pairs"]')
    toml.write_text(text.replace('primary = "blimp/acc"', 'primary = "blimp_pairs/acc"'))
    return load_task(task_dir)


async def test_a_language_model_with_nan_weights_gets_no_score_not_every_pair(
    tmp_path: Path,
) -> None:
    task = _blimp_shaped(tmp_path / "task")
    workspace = tmp_path / "workspace"
    llama(workspace / "submission")
    _rewrite(workspace / "submission", {"": float("nan")})
    _, finished = await grade(task, workspace, None, tmp_path / "eval")
    assert not finished.ok and finished.score is None and finished.normalized is None
    assert finished.success is None
    assert finished.error and "the model's weights hold NaN or infinite values" in finished.error
    assert "12 of 12 tensors" in finished.error


@pytest.mark.slow
async def test_a_language_model_that_does_not_fit_its_config_names_the_tensor(
    tmp_path: Path,
) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    task = _blimp_shaped(tmp_path / "task")
    workspace = tmp_path / "workspace"
    model = llama(workspace / "submission")
    weights = load_file(str(model / "model.safetensors"))
    weights["lm_head.weight"] = torch.zeros(200, 16)
    save_file(weights, str(model / "model.safetensors"), metadata={"format": "pt"})
    _, finished = await grade(task, workspace, None, tmp_path / "eval")
    assert not finished.ok and finished.score is None
    assert finished.error and finished.error.startswith(
        "lm-eval could not evaluate the submission: its weights do not fit the architecture"
    )
    assert "lm_head.weight: [200, 16] in the weights, [300, 16] by config.json" in finished.error


def test_a_tokenizer_that_does_not_belong_to_the_model_is_said_so(tmp_path: Path) -> None:
    """Another model's tokenizer saved beside the model: torch's 'The expanded size of the
    tensor (81) must match the existing size (48)' read as 'evaluator failed'."""
    task = load_task(BUILTIN_TASKS_DIR / "compress-budget")
    model = _bert(tmp_path / "alien-tokenizer", COMPRESS_LABELS, **SMALL)
    for old in model.glob("tokenizer*"):
        old.unlink()
    bpe_tokenizer(model)  # 300 tokens; the model has 168 embeddings
    error = _no_score(_evaluate(task, model, tmp_path / "eval"))
    assert error.startswith("evaluation error: the submitted tokenizer gives token ids up to ")
    assert (
        "and the model has 168 embeddings: save the tokenizer the model was trained with" in error
    )


@pytest.mark.slow
def test_a_model_cut_to_fewer_positions_than_its_tokenizer_gives_is_said_so(
    tmp_path: Path,
) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    task = load_task(BUILTIN_TASKS_DIR / "compress-budget")
    model = _bert(tmp_path / "short", COMPRESS_LABELS, **SMALL)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(config | {"max_position_embeddings": 4}))
    weights = load_file(str(model / "model.safetensors"))
    name = "bert.embeddings.position_embeddings.weight"
    weights[name] = torch.clone(weights[name][:4])
    save_file(weights, str(model / "model.safetensors"), metadata={"format": "pt"})
    error = _no_score(_evaluate(task, model, tmp_path / "eval"))
    assert "the submitted tokenizer gives held-out texts of up to " in error
    assert "and the model takes at most 4 positions" in error
    assert "set its model_max_length" in error


@pytest.mark.slow
def test_a_language_model_with_another_models_tokenizer_is_said_so(tmp_path: Path) -> None:
    """lm-eval's failure was 'IndexError: index out of range in self', naming nothing."""
    task = load_task(BUILTIN_TASKS_DIR / "tiny-lm")
    model = llama(tmp_path / "small-vocabulary", vocab_size=100)  # its tokenizer has 300
    error = _no_score(_evaluate(task, model, tmp_path / "eval"))
    assert error == (
        "lm-eval could not evaluate the submission: the submitted tokenizer has 300 tokens, "
        "and the model 100 embeddings (config.json's vocab_size), so a token id past them "
        "failed: save the tokenizer the model was trained with"
    )


@pytest.mark.slow
async def test_a_language_model_whose_likelihoods_overflow_gets_no_score(tmp_path: Path) -> None:
    """Finite weights, infinite logits: the weights pass their check, the NaN comes while
    lm-eval runs, and BLiMP's layout gave the model every pair (1.0)."""
    task = _blimp_shaped(tmp_path / "task")
    workspace = tmp_path / "workspace"
    llama(workspace / "submission")
    _rewrite(workspace / "submission", {"lm_head": 3e38})
    _, finished = await grade(task, workspace, None, tmp_path / "eval")
    assert not finished.ok and finished.score is None, finished
    assert finished.error == (
        "the model's log-likelihoods are NaN or infinite for 16 of the 16 requests lm-eval "
        "made (dtype auto): it scores nothing there, where lm-eval's arg-max counts a tie of "
        "NaN as the first choice"
    )


def test_validating_the_format_tells_the_agent_of_nan_weights_before_the_grade(
    tmp_path: Path,
) -> None:
    """What `validate` runs for a task without validation data (the benchmark tasks):
    the format and the rules, and now finite weights, so a diverged run hears it while
    it can still train again."""
    from mlra.tasks.evaluators.classifier import ClassifierEvaluator
    from mlra.tasks.evaluators.lm_eval import LmEvalEvaluator

    language = llama(tmp_path / "lm")
    _rewrite(language, {"": float("nan")})
    lm_task = load_task(standin_copy("babylm", tmp_path / "tasks"))
    said = LmEvalEvaluator(lm_task).check_format(language)
    assert not said.ok and said.error and "weights hold NaN or infinite values" in said.error
    classifier = _bert(tmp_path / "classifier", COMPRESS_LABELS, **SMALL)
    _rewrite(classifier, {"classifier": float("nan")})
    task = load_task(BUILTIN_TASKS_DIR / "compress-budget")
    said = ClassifierEvaluator(task).check_format(classifier)
    assert not said.ok and said.error and "(2 of " in said.error
