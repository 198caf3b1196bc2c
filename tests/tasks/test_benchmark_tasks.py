"""The seven ML Research Benchmark tasks: their files, what they need, their rules
and their evaluator wiring.

None of them can run here (each needs an A100-class GPU, the Hugging Face Hub and
24 hours), so the rules are checked on tiny models built from configs, and the
evaluator wiring on stand-ins: a copy of the real task whose lm-eval task names
resolve to local YAML tasks of the same names (`dataset_path: json`, data written
by the test), graded through mlra's grading path in a fresh process.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mlra import events as ev
from mlra.tasks import readiness
from mlra.tasks.constraints import check
from mlra.tasks.evaluators import progress as evaluator_progress
from mlra.tasks.evaluators.base import load_evaluator
from mlra.tasks.evaluators.lm_eval import LmEvalEvaluator
from mlra.tasks.evaluators.lm_eval_scores import flatten_metrics, primary_score
from mlra.tasks.evaluators.script import ScriptEvaluator
from mlra.tasks.grading import grade
from mlra.tasks.spec import BUILTIN_TASKS_DIR, TaskSpec, load_task
from mlra.tools.sandbox.gpu_inventory import Gpu
from tests.conftest import mlra_cli
from tests.tasks.standins import SUPERGLUE
from tests.tasks.standins import group_standin as _group_standin
from tests.tasks.standins import llama as _llama
from tests.tasks.standins import save as _save
from tests.tasks.standins import standin_copy as _standin_copy
from tests.tasks.standins import superglue_standin as _superglue_standin

BENCHMARK = [
    "minipile",
    "babylm",
    "llm-efficiency",
    "edge-llm-compression",
    "edge-llm-training",
    "llm-merging",
    "math-autoformalization",
]


def _task(name: str) -> TaskSpec:
    return load_task(BUILTIN_TASKS_DIR / name)


# --- the task files ------------------------------------------------------------------------


@pytest.mark.parametrize("name", BENCHMARK)
def test_each_task_loads_with_the_benchmarks_prompt_and_compute(name: str) -> None:
    task = _task(name)
    assert task.name == name
    prompt = task.render_prompt()
    for head in (
        "Task",
        "Dataset",
        "Models",
        "Compute",
        "Time limit",
        "Result",
        "Evaluation",
        "Rules",
    ):
        assert f"\n## {head}\n" in prompt, head
    assert "You have 24h" in prompt
    r = task.resources
    assert (r.time_limit, r.gpus, r.gpu_memory_gb, r.network) == ("24h", 1, 40, True)
    assert "A100" in task.prompt.compute
    assert "huggingface" in task.prompt.dataset.lower() or "hub" in task.prompt.dataset.lower()
    assert "submission/" in task.prompt.result
    assert task.evaluator.artifact == "submission"
    assert task.constraints.require_safetensors
    for path in task.starter_paths():
        assert (path / "README.md").is_file()
    load_evaluator(task)


REFERENCES = {
    # task: (baseline, top, where task.toml says they come from)
    "minipile": (0.457, 0.541, "algorithmicresearchgroup.com"),
    "babylm": (0.606, 0.698, "babylm/evaluation-pipeline-2024"),
    "math-autoformalization": (0.0, None, "algorithmicresearchgroup.com"),
    "llm-efficiency": (None, None, "No reference scores: unknown"),
    "edge-llm-compression": (None, None, "No reference scores recorded for the edge score"),
    "edge-llm-training": (None, None, "No reference scores: unknown"),
    "llm-merging": (None, None, "No reference scores: unknown"),
}


@pytest.mark.parametrize("name", BENCHMARK)
def test_reference_scores_are_recorded_with_their_source_or_said_unknown(name: str) -> None:
    baseline, top, source = REFERENCES[name]
    task = _task(name)
    assert (task.metric.baseline, task.metric.top) == (baseline, top)
    metric_section = (task.root / "task.toml").read_text().split("[metric]")[1].split("[")[0]
    assert source in metric_section


def test_the_docs_table_of_reference_scores_matches_the_task_files() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "tasks.md").read_text()
    table = page.split("Reference scores of the ML Research Benchmark tasks")[1]
    for name, (baseline, top, _) in REFERENCES.items():
        (row,) = [line for line in table.splitlines() if line.startswith(f"| `{name}` |")]
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == ("unknown" if baseline is None else f"{baseline:g}"), name
        assert cells[3] == ("unknown" if top is None else f"{top:g}"), name


def test_each_task_names_its_hub_data_and_benchmark() -> None:
    expected = {
        "minipile": ("AlgorithmicResearchGroup/minipile", "SuperGLUE"),
        "babylm": ("AlgorithmicResearchGroup/babylm", "BLiMP"),
        "llm-efficiency": ("Dolly", "MMLU"),
        "edge-llm-compression": ("microsoft/phi-2", "MMLU"),
        "edge-llm-training": ("AlgorithmicResearchGroup/edge_llm_training", "SuperGLUE"),
        "llm-merging": ("AlgorithmicResearchGroup/llm_merging", "MMLU"),
        "math-autoformalization": (
            "AlgorithmicResearchGroup/math_reasoning_autoformalization_track",
            "Lean 3",
        ),
    }
    for name, (data, bench) in expected.items():
        prompt = _task(name).render_prompt()
        assert data in prompt and bench in prompt, name


@pytest.mark.slow
def test_the_lm_eval_settings_name_real_lm_eval_tasks() -> None:
    """Every task name is in the installed lm-eval's registry, and the primary metrics
    average the benchmark's task group: SuperGLUE's eight tasks (a tag, so mlra averages),
    BLiMP's and MMLU's group aggregates (lm-eval averages)."""
    from lm_eval.tasks import TaskManager

    registry = TaskManager()
    for name in BENCHMARK[:-1]:
        settings = _task(name).evaluator.settings
        assert "include" not in settings, name  # lm-eval's own tasks, data from the Hub
        assert settings["batch_size"] == 8  # as the benchmark's lm_eval command
        for t in settings["tasks"]:
            assert t in registry.all_tasks, (name, t)
    for name in ("minipile", "edge-llm-training"):
        settings = _task(name).evaluator.settings
        assert settings["tasks"] == SUPERGLUE
        assert sorted(settings["tasks"]) == sorted(
            t for t in registry.all_subtasks if t in SUPERGLUE
        )
        # The seven accuracy tasks, weighted by examples (lm-eval 0.4.0-0.4.2's group
        # line); all eight in the mean reported beside it.
        assert [p.split("/")[0] for p in settings["primary"]] == [
            t for t in SUPERGLUE if t != "record"
        ]
        mean8 = settings["also_report"]["superglue/mean_of_8"]
        assert [p.split("/")[0] for p in mean8] == SUPERGLUE
    assert "blimp" in registry.all_groups and "mmlu" in registry.all_groups
    assert _task("babylm").evaluator.settings["primary"] == "blimp/acc"
    for name in ("llm-efficiency", "edge-llm-compression", "llm-merging"):
        assert _task(name).evaluator.settings["primary"] == "mmlu/acc"


def test_mlra_tasks_says_none_can_run_here_and_why(tmp_path: Path) -> None:
    proc = mlra_cli(["tasks"], cwd=tmp_path, env={"HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for name in BENCHMARK:
        (at,) = [i for i, line in enumerate(lines) if line.startswith(f"{name} ")]
        status = lines[at + 1]
        assert "needs 24h, 1 GPU (40 GB), network" in status, status
        if not readiness.gpus():
            assert "cannot run here now: needs 1 GPU; this machine has none" in status
        assert "needs the network for its data and models; HF_HUB_OFFLINE=1 is set" in status
    math = lines[next(i for i, x in enumerate(lines) if x.startswith("math-autoformalization")) + 1]
    if shutil.which("lean") is None:
        assert "its evaluator needs the `lean` command; it is not installed" in math


def test_readiness_without_a_gpu_or_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readiness, "gpus", lambda: ())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    readiness.network.cache_clear()
    try:
        for name in BENCHMARK:
            problems = readiness.blockers(_task(name))
            assert problems[:2] == [
                "needs 1 GPU; this machine has none",
                "needs the network for its data and models; HF_HUB_OFFLINE=1 is set",
            ]
        monkeypatch.setattr(readiness, "gpus", lambda: (Gpu("0", "NVIDIA A10", 24.0),))
        assert readiness.blockers(_task("minipile"))[0] == (
            "needs 40 GB of GPU memory; the largest GPU here has 24 GB"
        )
    finally:
        readiness.network.cache_clear()


# --- tiny stand-in models -----------------------------------------------------------------


def _phi(folder: Path, **overrides: Any) -> Path:
    """A Phi-2-shaped model: Phi-2's vocabulary, the rest pruned to almost nothing."""
    from transformers import PhiConfig, PhiForCausalLM

    config = dict(
        vocab_size=51200,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
    )
    return _save(PhiForCausalLM(PhiConfig(**(config | overrides))), folder, tokenizer=False)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 0.02M-parameter Llama with a byte-level BPE tokenizer: every stand-in's model."""
    return _llama(tmp_path_factory.mktemp("models") / "tiny")


def _claims(folder: Path, gigabytes: float, model_type: str = "llama") -> Path:
    """A submission whose safetensors header declares `gigabytes` of F32 weights; the
    data is not there (nothing is allocated): the rules read headers only."""
    folder.mkdir(parents=True)
    rows = int(gigabytes * 1e9 / 4 / 1024)
    header = json.dumps(
        {
            "model.embed_tokens.weight": {
                "dtype": "F32",
                "shape": [rows, 1024],
                "data_offsets": [0, rows * 4096],
            }
        }
    ).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    (folder / "config.json").write_text(json.dumps({"model_type": model_type, "vocab_size": rows}))
    return folder


def _with_rules(name: str, **rules: Any) -> TaskSpec:
    task = _task(name)
    return task.model_copy(update={"constraints": task.constraints.model_copy(update=rules)})


# --- the rules, on crafted submissions -----------------------------------------------------


def test_edge_training_refuses_a_model_over_1_gb(tmp_path: Path, tiny: Path) -> None:
    rules = _task("edge-llm-training").constraints
    assert check(tiny, rules)[0] == []
    broken, facts = check(_claims(tmp_path / "big", 1.2), rules)
    assert broken == [
        "max_load_memory_gb: the weights need 1.2 GB to load, more than the 1 GB allowed"
    ]
    assert facts["load_memory_gb"] == pytest.approx(1.2, abs=0.001)
    # The same rule on a real saved model, with the limit brought down to a few kB.
    small = _with_rules("edge-llm-training", max_load_memory_gb=0.00001).constraints
    assert check(tiny, small)[0] == [
        "max_load_memory_gb: the weights need 4.88e-05 GB to load, more than the 1e-05 GB allowed"
    ]


def test_edge_compression_keeps_phi2_unquantized_under_12_gb(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    rules = _task("edge-llm-compression").constraints
    pruned = _phi(tmp_path / "pruned")
    assert check(pruned, rules)[0] == []

    llama = _llama(tmp_path / "llama")
    (message,) = check(llama, rules)[0]
    assert message.startswith("allowed_base_models:") and "microsoft/phi-2" in message

    quantized = _phi(tmp_path / "quantized")
    config = json.loads((quantized / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_8bit": True}
    (quantized / "config.json").write_text(json.dumps(config))
    (message,) = check(quantized, rules)[0]
    assert message.startswith("forbid_quantized:") and "bitsandbytes" in message

    int8 = _phi(tmp_path / "int8")
    weights = load_file(int8 / "model.safetensors")
    weights = {k: v.to(torch.int8) if v.ndim == 2 else v for k, v in weights.items()}
    save_file(weights, int8 / "model.safetensors")
    (message,) = check(int8, rules)[0]
    assert message.startswith("forbid_quantized:") and "(I8)" in message

    huge = _claims(tmp_path / "huge", 13, model_type="phi")
    broken = check(huge, rules)[0]
    assert broken[0] == (
        "max_load_memory_gb: the weights need 13 GB to load, more than the 12 GB allowed"
    )


def test_llm_efficiency_accepts_approved_families_only(tmp_path: Path) -> None:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    rules = _task("llm-efficiency").constraints
    pythia = _save(
        GPTNeoXForCausalLM(
            GPTNeoXConfig(
                vocab_size=300,
                hidden_size=16,
                intermediate_size=32,
                num_hidden_layers=1,
                num_attention_heads=2,
            )
        ),
        tmp_path / "pythia",
        tokenizer=False,
    )
    assert check(pythia, rules)[0] == []
    (message,) = check(_phi(tmp_path / "phi"), rules)[0]
    assert message.startswith("allowed_base_models: the model's architecture {'model_type': 'phi'")
    assert "GPT-NeoX, Pythia" in message


def test_llm_merging_refuses_models_over_its_parameter_limit(tmp_path: Path, tiny: Path) -> None:
    rules = _task("llm-merging").constraints
    assert check(tiny, rules)[0] == []
    broken = check(_claims(tmp_path / "nine-b", 36), rules)[0]  # 9B F32 parameters, on paper
    assert broken == [
        "allowed_base_models: a Llama 2 / Llama 3 family model may have at most 8.1B "
        "parameters; this one has 9B"
    ]
    # Any family of the size class: the competition's families are suggestions (issue 30).
    assert check(_phi(tmp_path / "phi"), rules)[0] == []


def test_llm_merging_accepts_every_model_its_prompt_allows(tmp_path: Path) -> None:
    """The allowed models and the size rule agree: Gemma-7B (8,537,680,896 parameters,
    its 256k-token embedding included) and Llama-3-8B (8,030,261,248) pass, and a merge
    grown past its family's allowed model does not."""
    rules = _task("llm-merging").constraints
    assert "Gemma family (7B)" in _task("llm-merging").prompt.models
    for name, model_type, parameters in (
        ("gemma-7b", "gemma", 8_537_680_896),
        ("llama-3-8b", "llama", 8_030_261_248),
        ("mistral-7b", "mistral", 7_241_732_096),
    ):
        assert check(_claims(tmp_path / name, parameters * 4 / 1e9, model_type), rules)[0] == []
    grown = check(_claims(tmp_path / "gemma-9b", 9e9 * 4 / 1e9, "gemma"), rules)[0]
    assert grown == [
        "allowed_base_models: a Gemma family model may have at most 8.54B parameters; "
        "this one has 9B"
    ]


async def test_a_rule_breaker_gets_no_score_through_grading(tmp_path: Path, tiny: Path) -> None:
    folder = _standin_copy("edge-llm-training", tmp_path)
    toml = folder / "task.toml"
    toml.write_text(
        toml.read_text().replace("max_load_memory_gb = 1\n", "max_load_memory_gb = 0.00001\n")
    )
    task = load_task(folder)
    workspace = tmp_path / "workspace"
    shutil.copytree(tiny, workspace / "submission")
    _, finished = await grade(task, workspace, None, tmp_path / "eval")
    assert isinstance(finished, ev.EvaluationFinished)
    assert not finished.ok and finished.score is None and finished.normalized is None
    assert finished.error == "the submission breaks a rule"
    (violation,) = finished.violations
    assert violation == (
        'breaks the challenge\'s rule "The model must run on a device with 1 GB DRAM" (MLRB '
        "prompts.py edge_llm_training, Task and Rules): max_load_memory_gb: the weights need "
        "4.88e-05 GB to load, more than the 1e-05 GB allowed"
    )


# --- the evaluator wiring, on stand-ins ----------------------------------------------------


async def _grade_standin(
    task: TaskSpec,
    model: Path,
    tmp_path: Path,
    progress: list[ev.EvaluationProgress] | None = None,
) -> ev.EvaluationFinished:
    workspace = tmp_path / "workspace"
    shutil.copytree(model, workspace / "submission")
    seen = progress if progress is not None else []
    _, finished = await grade(task, workspace, None, tmp_path / "eval", on_progress=seen.append)
    return finished


@pytest.mark.slow
async def test_superglue_tasks_grade_as_the_benchmarks_lm_eval_printed_them(
    tmp_path: Path, tiny: Path
) -> None:
    """The examples-weighted accuracy of the seven accuracy tasks (lm-eval 0.4.0-0.4.2's
    group line; equal-sized stand-ins here, so a plain mean), the eight-task mean beside
    it (tests/tasks/test_challenge_edge_lm.py weighs unequal sizes)."""
    folder = _standin_copy("minipile", tmp_path, evaluator_lines='include = "standin"\n')
    _superglue_standin(folder / "standin")
    task = load_task(folder)
    assert task.evaluator.settings["tasks"] == _task("minipile").evaluator.settings["tasks"]
    finished = await _grade_standin(task, tiny, tmp_path)
    assert finished.ok, finished.error
    parts = [finished.metrics[p] for p in _task("minipile").evaluator.settings["primary"]]
    assert len(parts) == 7 and all(0 <= v <= 1 for v in parts)
    assert finished.score == pytest.approx(sum(parts) / 7, abs=1e-12)
    mean8 = (sum(parts) + finished.metrics["record/f1"]) / 8
    assert finished.metrics["superglue/mean_of_8"] == pytest.approx(mean8, abs=1e-12)
    assert finished.metric == "superglue_acc"
    assert finished.normalized == pytest.approx((finished.score - 0.457) / (0.541 - 0.457))


@pytest.mark.slow
async def test_blimp_grades_to_lm_evals_group_accuracy(
    tmp_path: Path, tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(evaluator_progress, "EVERY_S", 0.0)  # every line: this one is quick
    folder = _standin_copy("babylm", tmp_path, evaluator_lines='include = "standin"\n')
    _group_standin(
        folder / "standin",
        "blimp",
        {"blimp_standin_a": 4, "blimp_standin_b": 8},
        weight_by_size=False,
    )
    progress: list[ev.EvaluationProgress] = []
    finished = await _grade_standin(load_task(folder), tiny, tmp_path, progress)
    assert finished.ok, finished.error
    # lm-eval's own progress bar, read from its output while it graded.
    assert any(p.what == "Running loglikelihood requests" and p.total for p in progress), [
        p.line for p in progress
    ]
    a, b = finished.metrics["blimp_standin_a/acc"], finished.metrics["blimp_standin_b/acc"]
    assert finished.score == finished.metrics["blimp/acc"] == pytest.approx((a + b) / 2)


@pytest.mark.slow
async def test_mmlu_through_mlra_equals_a_direct_lm_eval_run(tmp_path: Path, tiny: Path) -> None:
    """The llm-merging task's settings on an MMLU stand-in: mlra's score (fresh process,
    rules checked, grading path) is the number `lm_eval.simple_evaluate` gives."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    folder = _standin_copy("llm-merging", tmp_path, evaluator_lines='include = "standin"\n')
    standin = _group_standin(
        folder / "standin",
        "mmlu",
        {"mmlu_standin_algebra": 4, "mmlu_standin_history": 10},
        weight_by_size=True,
    )
    task = load_task(folder)
    finished = await _grade_standin(task, tiny, tmp_path)
    assert finished.ok, finished.error

    settings = task.evaluator.settings
    rendered = tmp_path / "eval" / "lm_eval_tasks"  # the evaluator's copy, data paths absolute
    assert sorted(p.name for p in rendered.iterdir()) == sorted(p.name for p in standin.iterdir())
    results = lm_eval.simple_evaluate(
        model="hf",
        model_args={
            "pretrained": str(tmp_path / "workspace" / "submission"),
            "dtype": settings["dtype"],
        },
        tasks=settings["tasks"],
        task_manager=TaskManager(include_path=str(rendered), include_defaults=False),
        batch_size=settings["batch_size"],
        device="cpu",
        bootstrap_iters=0,
    )
    assert results is not None
    direct = flatten_metrics(results["results"])
    assert direct["mmlu/acc"] == pytest.approx(finished.score, rel=0, abs=1e-12)
    assert set(direct) == set(finished.metrics)
    a, h = direct["mmlu_standin_algebra/acc"], direct["mmlu_standin_history/acc"]
    assert finished.score == pytest.approx((4 * a + 10 * h) / 14)  # weighted by size


@pytest.mark.slow
def test_num_fewshot_and_limit_reach_lm_eval(tmp_path: Path, tiny: Path) -> None:
    folder = _standin_copy(
        "edge-llm-training",
        tmp_path,
        evaluator_lines='include = "standin"\nnum_fewshot = 2\nlimit = 3\n',
    )
    _superglue_standin(folder / "standin")
    outcome = LmEvalEvaluator(load_task(folder)).evaluate(tiny, work_dir=tmp_path / "work")
    assert outcome.ok, outcome.error
    samples = outcome.details["n_samples"]
    assert isinstance(samples, dict)
    assert samples["boolq"] == {"original": 6, "effective": 3}
    configs = outcome.details["results"]
    assert outcome.details["num_fewshot"] == 2 and outcome.details["limit"] == 3
    assert set(SUPERGLUE) <= set(configs)  # type: ignore[arg-type]


@pytest.mark.slow
def test_hub_data_missing_offline_is_one_clear_line(
    tmp_path: Path, tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real minipile settings (SuperGLUE from the Hub) on a machine that is offline
    and has no cached copy: the user reads which dataset is missing, not a traceback."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    outcome = LmEvalEvaluator(_task("minipile")).evaluate(tiny, work_dir=tmp_path / "work")
    assert not outcome.ok and outcome.score is None
    assert outcome.error is not None and "\n" not in outcome.error
    assert outcome.error.startswith(
        "the lm-eval data is not available offline: dataset 'aps/super_glue' is not in the "
        "Hugging Face cache and HF_DATASETS_OFFLINE=1 and HF_HUB_OFFLINE=1 is set"
    ), outcome.error


@pytest.mark.slow
def test_a_task_name_lm_eval_does_not_know_is_a_task_error(tmp_path: Path, tiny: Path) -> None:
    task = _task("babylm")
    bad = task.model_copy(
        update={
            "evaluator": task.evaluator.model_copy(
                update={"settings": task.evaluator.settings | {"tasks": ["blimpp"]}}
            )
        }
    )
    outcome = LmEvalEvaluator(bad).evaluate(tiny, work_dir=tmp_path / "work")
    assert outcome.error and re.fullmatch(
        r"task error: lm-eval \S* ?knows no task named blimpp", outcome.error
    )


def test_primary_may_average_a_list_or_a_glob() -> None:
    metrics = {"a/acc": 0.5, "b/acc": 1.0, "b/f1": 0.0, "blimp_x/acc": 0.2, "blimp_y/acc": 0.4}
    assert primary_score(metrics, "a/acc") == (0.5, ["a/acc"], [])
    assert primary_score(metrics, ["a/acc", "b/f1"]) == (0.25, ["a/acc", "b/f1"], [])
    score, used, _ = primary_score(metrics, "blimp_*/acc")
    assert used == ["blimp_x/acc", "blimp_y/acc"] and score == pytest.approx(0.3)
    assert primary_score(metrics, ["a/acc", "c/acc"]) == (None, ["a/acc"], ["c/acc"])


# --- math-autoformalization: Lean 3, BLEU, ROUGE -------------------------------------------


def _math_script() -> ModuleType:
    path = BUILTIN_TASKS_DIR / "math-autoformalization" / "hidden" / "evaluate.py"
    spec = importlib.util.spec_from_file_location("autoformalization_evaluate", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bleu_and_rouge_against_references() -> None:
    m = _math_script()
    ref = "theorem foo : (1 : ℕ) + 1 = 2 := by norm_num"
    assert m.corpus_bleu([ref], [ref]) == pytest.approx(1.0)
    assert m.rouge(ref, ref) == {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0}
    assert m.corpus_bleu(["lemma bar"], [ref]) == 0.0
    assert m.rouge("completely different words", ref)["rougeL"] == 0.0
    partial = m.rouge("theorem foo : 1 + 1 = 3", ref)
    assert 0 < partial["rouge2"] < partial["rouge1"] < 1
    # ROUGE-L is the F1 of the longest common subsequence: 3 of 4 and 3 of 3 tokens.
    assert m.rouge("a b x c", "a b c")["rougeL"] == pytest.approx(2 * 0.75 * 1.0 / 1.75)
    shorter = m.corpus_bleu([ref.rsplit(" ", 2)[0]], [ref])
    assert 0 < shorter < 1  # the brevity penalty


def test_the_math_script_generates_with_the_submitted_model(tiny: Path) -> None:
    m = _math_script()
    problems = [
        {
            "name": "p1",
            "informal_statement": "1 + 1 = 2",
            "informal_proof": "Compute.",
            "formal_proof": "theorem p1 : 1 + 1 = 2 := rfl",
        },
        {
            "name": "p2",
            "informal_statement": "2 > 1",
            "informal_proof": "Obvious.",
            "formal_proof": "theorem p2 : 2 > 1 := dec_trivial",
        },
    ]
    outputs = m.generate(tiny, problems, max_new_tokens=6)
    assert len(outputs) == 2 and all(isinstance(o, str) for o in outputs)
    assert "Formal statement and proof in Lean 3:" in m.PROMPT.format(**problems[0])


async def test_grading_math_without_lean_says_lean_is_missing(tmp_path: Path, tiny: Path) -> None:
    if shutil.which("lean") is not None:
        pytest.skip("lean is installed here; this test is about a machine without it")
    folder = _standin_copy("math-autoformalization", tmp_path)
    problems = folder / "hidden" / "problems.jsonl"
    problems.write_text(
        json.dumps(
            {"name": "p", "informal_statement": "s", "informal_proof": "p", "formal_proof": "f"}
        )
        + "\n"
    )
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace('"--problems", "hub"', f'"--problems", "{problems}"'))
    task = load_task(folder)
    assert isinstance(load_evaluator(task), ScriptEvaluator)
    finished = await _grade_standin(task, tiny, tmp_path)
    assert not finished.ok and finished.score is None
    assert finished.error and finished.error.startswith("evaluation script failed (exit 3): ")
    assert (
        "lean (Lean 3) is not installed or not on PATH: the compile rate cannot be measured"
        in finished.error
    )


def test_importing_the_evaluators_stays_light() -> None:
    """`mlra tasks` loads every task file; none may pull in torch or lm-eval."""
    code = (
        "import sys\nfrom mlra.tasks.spec import builtin_task_dirs, load_task\n"
        "from mlra.tasks.readiness import blockers\n"
        "for d in builtin_task_dirs(): load_task(d)\n"
        "assert not [m for m in ('torch', 'lm_eval', 'transformers') if m in sys.modules]\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
