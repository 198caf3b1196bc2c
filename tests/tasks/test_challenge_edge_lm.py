"""edge-llm-training, edge-llm-compression, minipile and babylm graded as their
challenges meant them (issue 30): the rules each prompt states, checked where the
files or a run of the model can tell, in the rule's words; memory while the model
runs measured apart from the evaluator's own; SuperGLUE on the scale the benchmark's
command printed; degenerate submissions and what each gets.

Tiny models built from configs stand in for real ones (nothing is downloaded); the
lm-eval runs are slow tests on stand-in task YAMLs.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.tasks.constraints import check
from mlra.tasks.evaluators.edge_efficiency import EfficiencySettings, edge_score
from mlra.tasks.evaluators.known_tokenizers import KNOWN, PROBE, pretrained_vocabulary
from mlra.tasks.evaluators.lm_eval_scores import primary_score, sample_counts
from mlra.tasks.evaluators.model_memory import measure_in_fresh_process
from mlra.tasks.grading import grade
from mlra.tasks.spec import BUILTIN_TASKS_DIR, TaskSpec, load_task
from tests.tasks.standins import bpe_tokenizer as _tokenizer
from tests.tasks.standins import save as _save
from tests.tasks.standins import standin_copy as _standin_copy
from tests.tasks.standins import write_mc_task as _write_mc_task

EDGE = ["edge-llm-training", "edge-llm-compression"]
SUPERGLUE_ACC = [
    "boolq/acc",
    "cb/acc",
    "copa/acc",
    "multirc/acc",
    "sglue_rte/acc",
    "wic/acc",
    "wsc/acc",
]


def _task(name: str) -> TaskSpec:
    return load_task(BUILTIN_TASKS_DIR / name)


def _gpt2(folder: Path, *, dtype: str = "float32", tokenizer: bool = True, **kw: Any) -> Path:
    """A tiny GPT-2 (random weights: a model trained from nothing), saved in `dtype`."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config: dict[str, Any] = dict(vocab_size=300, n_positions=256, n_layer=1, n_head=2, n_embd=16)
    config |= {"bos_token_id": 0, "eos_token_id": 0}
    model = GPT2LMHeadModel(GPT2Config(**(config | kw))).to(getattr(torch, dtype))
    return _save(model, folder, tokenizer)


def _tiny_phi(folder: Path, *, dtype: str = "float16") -> Path:
    """Phi-2's architecture family and vocabulary, the rest pruned to almost nothing."""
    import torch
    from transformers import PhiConfig, PhiForCausalLM

    torch.manual_seed(0)
    config = PhiConfig(
        vocab_size=51200,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=256,
    )
    return _save(PhiForCausalLM(config).to(getattr(torch, dtype)), folder, tokenizer=False)


async def _grade(task: TaskSpec, model: Path, tmp_path: Path) -> ev.EvaluationFinished:
    """Through mlra's grading: frozen copy, fresh sandboxed evaluation process, rules."""
    workspace = tmp_path / "workspace"
    shutil.copytree(model, workspace / "submission")
    _, finished = await grade(task, workspace, None, tmp_path / "eval")
    assert isinstance(finished, ev.EvaluationFinished)
    return finished


# --- FP16 or FP32 -------------------------------------------------------------------------


@pytest.mark.parametrize("name", EDGE)
def test_fp16_and_fp32_pass_bf16_and_fp64_are_refused(name: str, tmp_path: Path) -> None:
    """ "The model must be submitted in FP16 or FP32 format": BF16 is neither (nor is
    FP64), whatever its size; both edge tasks refuse it from the safetensors headers."""
    rules = _task(name).constraints
    make = _tiny_phi if name == "edge-llm-compression" else _gpt2
    for ok in ("float16", "float32"):
        assert check(make(tmp_path / ok, dtype=ok), rules)[0] == [], ok
    for bad, tag in (("bfloat16", "BF16"), ("float64", "F64")):
        broken, facts = check(make(tmp_path / bad, dtype=bad), rules)
        (violation,) = broken
        assert violation.startswith("allowed_dtypes: the weights hold ") and tag in violation
        assert "only F16 or F32 is allowed" in violation
        assert set(facts["dtypes"]) == {tag}


async def test_a_bf16_model_is_refused_in_the_challenges_words(tmp_path: Path) -> None:
    task = load_task(_standin_copy("edge-llm-training", tmp_path))
    finished = await _grade(task, _gpt2(tmp_path / "bf16", dtype="bfloat16"), tmp_path)
    assert not finished.ok and finished.score is None
    (violation,) = finished.violations
    assert violation.startswith(
        "breaks the challenge's rule \"The model must be submitted in FP16 or FP32 format "
        '(no quantization allowed)" (MLRB prompts.py edge_llm_training, Task and Rules): '
        "allowed_dtypes: the weights hold "
    )


# --- memory while running, measured apart from the evaluator ------------------------------


# Slow: two fresh torch and transformers processes, each building and running a model.
@pytest.mark.slow
def test_memory_while_running_is_the_models_own_and_more_than_its_weights(
    tmp_path: Path,
) -> None:
    """1 GB of DRAM is memory while the model runs: a 2000-token pass over an 8,000-word
    vocabulary makes 64 MB of logits alone, whatever the weights weigh. And it is the
    model's own: the grading process may hold lm-eval's copy of the model (here 400 MB
    of anything), and the figure is the same without it."""
    model = _gpt2(tmp_path / "m", vocab_size=8000, n_positions=2048, tokenizer=False)
    weights = check(model, _task("edge-llm-training").constraints)[1]["load_memory_gb"] * 1e9
    alone = measure_in_fresh_process(device="cpu", sequence_length=2000, artifact=model)
    held_by_the_evaluator = bytearray(400 * 1024 * 1024)
    held_by_the_evaluator[::4096] = b"x" * len(held_by_the_evaluator[::4096])  # resident
    got = measure_in_fresh_process(device="cpu", sequence_length=2000, artifact=model)
    del held_by_the_evaluator
    assert got.peak_cuda_bytes is None and got.device == "cpu"
    assert got.sequence_length == 2000
    assert got.peak_bytes > 5 * weights and got.peak_bytes > 2000 * 8000 * 4
    assert abs(got.peak_bytes - alone.peak_bytes) < 50e6, (alone, got)
    assert got.peak_bytes < 400e6  # not the 400 MB the grading process holds
    assert got.peak_rss_bytes - got.rss_before_model_bytes == got.peak_bytes
    # A model of fewer positions than the setting runs over its own: the edge-training
    # grading below measures a 256-position model at memory/sequence_length 256.


async def test_a_model_over_its_memory_while_running_gets_no_score(tmp_path: Path) -> None:
    """Weights of 2 MB pass a 50 MB load limit; running them over 2000 tokens does not.
    The check runs before lm-eval (which would change nothing), and says the rule."""
    folder = _standin_copy("edge-llm-training", tmp_path)
    toml = folder / "task.toml"
    text = toml.read_text()
    text = text.replace("max_load_memory_gb = 1\n", "max_load_memory_gb = 0.05\n")
    text = text.replace("running_memory = { max_gb = 1,", "running_memory = { max_gb = 0.05,")
    toml.write_text(text)
    model = _gpt2(tmp_path / "m", vocab_size=8000, n_positions=2048)
    finished = await _grade(load_task(folder), model, tmp_path)
    assert not finished.ok and finished.score is None
    (violation,) = finished.violations
    assert violation.startswith(
        'breaks the challenge\'s rule "The model must run on a device with 1 GB DRAM"'
    )
    assert "running_memory: the model needed " in violation
    assert "a 2000-token forward pass at batch 1, the model alone in a fresh process" in violation
    assert finished.metrics["memory/peak_gb"] > 0.05
    assert not any(k.endswith("/acc") for k in finished.metrics)  # lm-eval never ran


def test_the_edge_tasks_say_how_memory_is_measured() -> None:
    training = _task("edge-llm-training")
    assert training.evaluator.settings["running_memory"] == {
        "max_gb": 1,
        "sequence_length": 2000,
        "batch_size": 1,
    }
    assert "fresh process" in training.prompt.evaluation
    compression = _task("edge-llm-compression")
    assert "alone in a fresh process" in compression.prompt.evaluation
    eff = EfficiencySettings.model_validate(compression.evaluator.settings["efficiency"])
    assert eff.max_peak_memory_gb == 12


# --- compression: the efficiency factor, a deliberate difference ---------------------------


def test_compression_says_its_score_differs_and_reports_mmlu_beside_it() -> None:
    task = _task("edge-llm-compression")
    assert task.challenge.differs and task.challenge.own_metric == "mmlu/acc"
    summary = task.challenge.summary({"mmlu/acc": 0.58, "edge/speedup": 1.0})
    assert summary is not None and summary.own_score == 0.58
    assert "Compression only" in task.prompt.rules or "no training" in task.prompt.rules
    assert "calibration" in task.prompt.dataset and "no training" in task.prompt.dataset
    trusted = [r.text for r in task.challenge.rules if r.status == "trusted"]
    assert any("no training is allowed" in t for t in trusted)
    assert any("distill" in t for t in trusted)


def test_degenerate_compression_submissions() -> None:
    """Unchanged Phi-2 passes every rule and scores a third of its skill (no faster);
    a model pruned to nothing is fast and at chance: 0; an empty folder has no score."""
    s = EfficiencySettings.model_validate(
        _task("edge-llm-compression").evaluator.settings["efficiency"]
    )
    unchanged, parts = edge_score(0.56, 1.0, s)
    assert unchanged == pytest.approx((0.56 - 0.25) / 0.75 / 3)
    assert parts["edge/efficiency_factor"] == pytest.approx(1 / 3)
    assert edge_score(0.25, 40.0, s)[0] == 0.0


# --- the tokenizer: trained on the data provided, not a known pretrained vocabulary ---------


def _word_tokenizer(folder: Path, vocab: dict[str, int]) -> Any:
    """A real fast tokenizer whose ids for the probe are whatever `vocab` says."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    inner = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    inner.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=inner, eos_token="<eos>", unk_token="<unk>")
    tok.save_pretrained(folder)
    return tok


def test_known_pretrained_vocabularies_are_recognized(tmp_path: Path) -> None:
    assert len(KNOWN) == 5 and PROBE == "Hello world"
    gpt2_like = _word_tokenizer(
        tmp_path / "a", {"<unk>": 1, "<eos>": 50256, "Hello": 15496, "world": 995}
    )
    assert pretrained_vocabulary(gpt2_like) is not None
    assert "GPT-2" in str(pretrained_vocabulary(gpt2_like))
    trained_here = _tokenizer(tmp_path / "b")  # a BPE trained on the data at hand
    assert pretrained_vocabulary(trained_here) is None
    other = _word_tokenizer(tmp_path / "c", {"<unk>": 0, "<eos>": 1, "Hello": 2, "world": 3})
    assert pretrained_vocabulary(other) is None


async def test_babylm_refuses_a_pretrained_tokenizer_in_the_rules_words(tmp_path: Path) -> None:
    task = load_task(_standin_copy("babylm", tmp_path))
    assert task.evaluator.settings["refuse_pretrained_tokenizer"] is True
    model = _gpt2(tmp_path / "m", vocab_size=50257, tokenizer=False)
    _word_tokenizer(model, {"<unk>": 1, "<eos>": 50256, "Hello": 15496, "world": 995})
    finished = await _grade(task, model, tmp_path)
    assert not finished.ok and finished.score is None
    (violation,) = finished.violations
    assert violation.startswith(
        'breaks the challenge\'s rule "You must train strictly on the dataset provided"'
    )
    assert "pretrained_tokenizer: the submitted tokenizer is GPT-2's" in violation


def test_babylm_example_trains_its_own_tokenizer() -> None:
    example = (BUILTIN_TASKS_DIR / "babylm" / "starter" / "example.py").read_text()
    assert "train_new_from_iterator" in example
    task = _task("babylm")
    assert "A pretrained tokenizer such as GPT-2's may be used" not in task.prompt.models
    assert "refused" in task.prompt.models


def test_babylm_references_say_which_pipeline_they_come_from() -> None:
    task = _task("babylm")
    assert (task.metric.baseline, task.metric.top) == (0.606, 0.698)
    note = task.challenge.metric_note
    assert "another pipeline" in note and "filtered BLiMP" in note and "full `blimp`" in note


# --- SuperGLUE on the benchmark's scale -----------------------------------------------------


@pytest.mark.parametrize("name", ["minipile", "edge-llm-training"])
def test_superglue_is_scored_as_the_benchmarks_lm_eval_printed_it(name: str) -> None:
    settings = _task(name).evaluator.settings
    assert settings["primary"] == SUPERGLUE_ACC
    assert settings["primary_weighting"] == "samples"
    assert settings["also_report"]["superglue/mean_of_8"] == [
        *SUPERGLUE_ACC[:4],
        "record/f1",
        *SUPERGLUE_ACC[4:],
    ]


def test_the_examples_weighted_mean_and_the_unweighted_one() -> None:
    """lm-eval 0.4.0-0.4.2's group line: each task's accuracy weighted by its examples
    (BoolQ 3,270 and MultiRC 4,848 of 9,293 dominate); ReCoRD's F1 is not an accuracy."""
    n = {"boolq": 3270, "cb": 56, "copa": 100, "multirc": 4848, "sglue_rte": 277}
    n |= {"wic": 638, "wsc": 104, "record": 10000}
    metrics = {k: 0.5 for k in SUPERGLUE_ACC} | {"boolq/acc": 0.62, "record/f1": 0.1}
    counts = sample_counts({t: {"original": c, "effective": c} for t, c in n.items()})
    score, used, missing = primary_score(metrics, SUPERGLUE_ACC, sizes=counts)
    assert missing == [] and used == SUPERGLUE_ACC
    assert score == pytest.approx((0.62 * 3270 + 0.5 * (9293 - 3270)) / 9293)
    mean8 = primary_score(metrics, [*SUPERGLUE_ACC, "record/f1"])[0]
    assert mean8 == pytest.approx((0.62 + 0.5 * 6 + 0.1) / 8)
    # A task lm-eval gave no count for cannot be weighted: missing, not silently 0.
    assert primary_score(metrics, SUPERGLUE_ACC, sizes={"boolq": 3})[2] == SUPERGLUE_ACC[1:]


def test_minipile_references_are_on_that_scale_with_their_source() -> None:
    task = _task("minipile")
    assert (task.metric.baseline, task.metric.top) == (0.457, 0.541)
    note = task.challenge.metric_note
    assert "super-glue-lm-eval-v1" in note and "0.457" in note and "MLRB blog" in note
    assert "superglue/mean_of_8" in task.prompt.evaluation


# --- degenerate submissions ---------------------------------------------------------------


@pytest.mark.parametrize("name", [*EDGE, "minipile", "babylm"])
def test_an_empty_folder_is_refused_before_anything_runs(name: str, tmp_path: Path) -> None:
    empty = tmp_path / "submission"
    empty.mkdir()
    broken, _ = check(empty, _task(name).constraints)
    assert broken[0] == "no model weights found (no *.safetensors file in the submission)"


def _fake_f32(folder: Path, rows: int) -> Path:
    folder.mkdir(parents=True)
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [rows, 1024], "data_offsets": [0, rows * 4096]}}
    ).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    return folder


@pytest.mark.parametrize("name", ["edge-llm-training", "minipile", "babylm"])
def test_a_random_model_passes_the_rules_and_is_left_to_the_benchmark(
    name: str, tmp_path: Path
) -> None:
    """A model never trained (random weights) breaks no rule a file can show: it is
    graded, and scores what chance gives on the benchmark (the slow tests show it)."""
    assert check(_gpt2(tmp_path / "random"), _task(name).constraints)[0] == []


def test_a_model_too_big_to_load_in_1_gb_is_refused(tmp_path: Path) -> None:
    broken, _ = check(_fake_f32(tmp_path / "big", 300_000), _task("edge-llm-training").constraints)
    assert broken == [
        "max_load_memory_gb: the weights need 1.23 GB to load, more than the 1 GB allowed"
    ]


def test_every_rule_of_the_four_tasks_is_checked_or_trusted_with_a_reason() -> None:
    for name in [*EDGE, "minipile", "babylm"]:
        challenge = _task(name).challenge
        assert challenge.rules, name
        for rule in challenge.rules:
            assert rule.how.strip() and rule.source.strip(), (name, rule.text)
            if rule.status == "checked":
                assert rule.checks, (name, rule.text)


# --- through lm-eval (slow) ---------------------------------------------------------------


@pytest.mark.slow
async def test_a_random_model_on_superglue_scores_the_examples_weighted_accuracy(
    tmp_path: Path,
) -> None:
    """minipile's settings on SuperGLUE stand-ins (tasks of different sizes): the score
    is the examples-weighted accuracy, the eight-task mean reported beside it."""
    folder = _standin_copy("minipile", tmp_path, evaluator_lines='include = "standin"\n')
    (folder / "standin").mkdir()
    docs = {"boolq": 12, "multirc": 10, "record": 4} | {t: 3 for t in ("cb", "copa", "wic")}
    docs |= {"sglue_rte": 5, "wsc": 2}
    for t, n in docs.items():
        _write_mc_task(folder / "standin", t, metric="f1" if t == "record" else "acc", docs=n)
    finished = await _grade(load_task(folder), _gpt2(tmp_path / "random"), tmp_path)
    assert finished.ok, finished.error
    acc = [finished.metrics[k] for k in SUPERGLUE_ACC]
    sizes = [docs[k.split("/")[0]] for k in SUPERGLUE_ACC]
    weighted = sum(a * n for a, n in zip(acc, sizes, strict=True)) / sum(sizes)
    assert finished.score is not None and finished.score == pytest.approx(weighted)
    mean8 = (sum(acc) + finished.metrics["record/f1"]) / 8
    assert finished.metrics["superglue/mean_of_8"] == pytest.approx(mean8)
    assert finished.normalized == pytest.approx((finished.score - 0.457) / (0.541 - 0.457))


@pytest.mark.slow
async def test_a_random_model_for_edge_training_runs_in_1_gb_and_scores_near_chance(
    tmp_path: Path,
) -> None:
    """The degenerate from-scratch submission: never trained, FP16, tiny. It breaks no
    rule (its memory while running is measured and reported), and it is graded: what
    it scores is what guessing gives on the stand-ins, nothing more."""
    folder = _standin_copy("edge-llm-training", tmp_path, evaluator_lines='include = "standin"\n')
    (folder / "standin").mkdir()
    for t in ("boolq", "cb", "copa", "multirc", "record", "sglue_rte", "wic", "wsc"):
        _write_mc_task(folder / "standin", t, metric="f1" if t == "record" else "acc", docs=4)
    finished = await _grade(load_task(folder), _gpt2(tmp_path / "r", dtype="float16"), tmp_path)
    assert finished.ok and not finished.violations, (finished.error, finished.violations)
    assert 0 < finished.metrics["memory/peak_gb"] < 1
    assert finished.metrics["memory/sequence_length"] == 256
    assert finished.score is not None and 0 <= finished.score <= 1
    assert finished.normalized is None  # no reference scores for this task
    assert finished.rules is not None and finished.rules.checked == 4


def test_a_running_memory_setting_without_a_limit_is_a_task_error(tmp_path: Path) -> None:
    from mlra.tasks.evaluators.lm_eval_checks import settings_problem

    settings = dict(_task("edge-llm-training").evaluator.settings)
    assert settings_problem(settings) is None
    for bad in ({"sequence_length": 2000}, {"max_gb": 0}, {"max_gb": True}, "1 GB"):
        assert settings_problem(settings | {"running_memory": bad}) == (
            "evaluator.settings.running_memory needs max_gb, a positive number of GB"
        )
    assert "primary_weighting" in str(settings_problem(settings | {"primary_weighting": "x"}))


def test_compression_refuses_what_training_leaves_in_the_folder(tmp_path: Path) -> None:
    """ "No training is allowed": a folder saved from a Trainer run says so itself (its
    arguments and state beside the model, or its model card); a pruned model saved with
    save_pretrained carries none of it."""
    rules = _task("edge-llm-compression").constraints
    assert rules.forbid_training_files
    pruned = _tiny_phi(tmp_path / "pruned")
    assert check(pruned, rules)[0] == []
    trained = shutil.copytree(pruned, tmp_path / "trained")
    (trained / "trainer_state.json").write_text("{}")
    (trained / "training_args.bin").write_bytes(b"\x80")
    (violation,) = check(trained, rules)[0]
    assert violation == (
        "forbid_training_files: the submission holds what training leaves "
        "(trainer_state.json, training_args.bin); no training is allowed"
    )
    carded = shutil.copytree(pruned, tmp_path / "carded")
    (carded / "README.md").write_text(
        "# phi-pruned\n\n## Training procedure\n\n### Training hyperparameters\n"
    )
    (violation,) = check(carded, rules)[0]
    assert "README.md, a Trainer model card ('Training hyperparameters')" in violation
    rule = next(r for r in _task("edge-llm-compression").challenge.rules if "no training" in r.text)
    assert rule.status == "trusted" and rule.checks == ["forbid_training_files"]
