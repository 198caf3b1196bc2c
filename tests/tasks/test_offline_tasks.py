"""The three small offline tasks: classify-finetune, compress-budget and merge-models.

Each task's baseline recipe runs end to end through `mlra run --model baseline`
(module fixtures, 10-20 s each on an idle machine) and must reproduce the reference
score recorded in its task.toml; crafted rule-breaking submissions are refused
by the constraint checks in the fresh evaluation process, naming the rule; and
nothing hidden reaches the workspace.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from mlra.tasks.evaluators.base import EvalOutcome, run_evaluation
from mlra.tasks.spec import BUILTIN_TASKS_DIR, TaskSpec, find_task, load_task
from tests.conftest import mlra_cli, offline_env, run_baseline

TASKS = ["classify-finetune", "compress-budget", "merge-models"]
# The recipes are deterministic on one machine (fixed seeds, step budgets, 1 thread):
# every repeat there gives exactly the recorded score. Another CPU may round
# differently and flip a few of the 2,000 test predictions; a score outside this band
# means the recipe, the data, the models or the evaluation changed.
BASELINE_TOLERANCE = 0.02


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        out += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return out


def _texts(path: Path) -> set[str]:
    if path.suffix == ".jsonl":
        return {json.loads(line)["text"] for line in path.read_text().splitlines() if line.strip()}
    return {line for line in path.read_text().splitlines() if line.strip()}


def _evaluate(task: TaskSpec, artifact: Path, work: Path) -> EvalOutcome:
    return asyncio.run(run_evaluation(task, artifact, work))


@pytest.fixture(scope="module", params=TASKS)
def task(request: pytest.FixtureRequest) -> TaskSpec:
    return load_task(BUILTIN_TASKS_DIR / request.param)


_RUNS: dict[str, Path] = {}


@pytest.fixture(scope="module")
def baseline_run(task: TaskSpec, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`mlra run TASK --model baseline --baseline-validate --no-tui`, end to end: the run
    folder (once per task)."""
    if task.name not in _RUNS:
        root = tmp_path_factory.mktemp(task.name)
        proc, run_dir = run_baseline(
            task.name, root, "--baseline-validate", env=offline_env(), timeout=1200
        )
        assert f"score {task.metric.name} = " in proc.stdout.strip().splitlines()[-1]
        _RUNS[task.name] = run_dir
    return _RUNS[task.name]


# --- the task files -------------------------------------------------------------------


def test_each_task_loads_with_a_full_prompt_and_measured_references(task: TaskSpec) -> None:
    assert find_task(task.name).root == task.root  # `mlra run NAME` finds it by name
    assert task.evaluator.kind == "classifier" and task.resources.gpus == 0
    assert task.resources.network is False and task.resources.cpus == 2
    assert task.metric.higher_is_better
    assert task.metric.baseline is not None and task.metric.top is not None
    assert 0 < task.metric.baseline < task.metric.top <= 1
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
        "Notes",
    ):
        assert f"\n## {head}\n" in prompt, head
    assert "submission/" in prompt
    assert task.baseline.steps and task.baseline.submit == "submission"
    assert task.constraints.active() and task.constraints.forbid_quantized
    assert all((task.root / rel).is_file() for rel in task.evaluator.settings["tests"].values())


def test_the_held_out_reviews_are_not_in_the_given_data(task: TaskSpec) -> None:
    given: set[str] = set()
    for path in _files(task.starter_paths()):
        if path.suffix in (".jsonl", ".txt"):
            given |= _texts(path)
    tests = [task.root / rel for rel in task.evaluator.settings["tests"].values()]
    assert given and tests
    for path in tests:
        held = _texts(path)
        assert len(held) == 2000
        assert not held & given, path.name


def test_mlra_tasks_lists_and_shows_the_tasks(tmp_path: Path) -> None:
    listing = mlra_cli(["tasks"], cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    for name in TASKS:
        line = next(line for line in listing.stdout.splitlines() if line.startswith(name))
        title = load_task(BUILTIN_TASKS_DIR / name).title
        assert title in line
    shown = mlra_cli(["tasks", "show", "compress-budget"], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "# Compress a review classifier to under 100k parameters" in shown.stdout
    assert "quantization is not allowed" in shown.stdout


# --- the baseline recipe, end to end -----------------------------------------------------


@pytest.mark.slow
def test_the_baseline_agent_reproduces_the_reference_score(
    task: TaskSpec, baseline_run: Path
) -> None:
    result = json.loads((baseline_run / "result.json").read_text())
    assert result["status"] == "finished" and result["reason"] == "submitted"
    assert result["model"] == "baseline" and result["tokens"] == 0
    outcome = EvalOutcome.model_validate_json(
        (baseline_run / "evaluation" / "evaluation.json").read_text()
    )
    assert outcome.ok, outcome.error
    assert outcome.violations == []
    assert outcome.details["isolation"] in ("bwrap", "none")
    assert task.metric.baseline is not None
    assert abs(result["score"] - task.metric.baseline) <= BASELINE_TOLERANCE, result["score"]
    assert result["score"] == outcome.score
    per_task = [v for k, v in outcome.metrics.items() if k.endswith("/accuracy")]
    assert outcome.score == pytest.approx(sum(per_task) / len(per_task))
    # The rules were checked on the real submission before it was scored.
    facts = outcome.details["constraints"]
    assert isinstance(facts, dict) and facts["dtypes"] == {"F32": facts["parameters"]}
    if task.constraints.max_parameters is not None:
        assert facts["parameters"] <= task.constraints.max_parameters


@pytest.mark.slow
def test_the_baseline_validates_at_its_recorded_validation_score(
    task: TaskSpec, baseline_run: Path
) -> None:
    """`validate` before the submit graded the validation split, whose score is the one
    task.toml records beside the test score, and which the agent saw as such."""
    from mlra import events as ev
    from mlra.agent.record.eventlog import read_events

    events = read_events(baseline_run / "events.jsonl")
    (validation,) = [e for e in events if isinstance(e, ev.Validation)]
    assert validation.ok and validation.split == "validation", validation.error
    assert task.validation.baseline is not None and validation.score is not None
    assert abs(validation.score - task.validation.baseline) <= BASELINE_TOLERANCE
    assert task.validation.settings is not None
    named = task.validation.settings["tests"]
    assert set(validation.metrics) >= {f"{name}/accuracy" for name in named}
    (result,) = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "validate"]
    assert "Validation split (not the hidden test split)" in result.output


@pytest.mark.slow
def test_hidden_files_are_absent_from_the_workspace(task: TaskSpec, baseline_run: Path) -> None:
    workspace = baseline_run / "workspace"
    in_workspace = {p.relative_to(workspace) for p in workspace.rglob("*") if p.is_file()}
    names = {p.name for p in in_workspace}
    hidden = _files(task.hidden_paths())
    assert hidden
    for path in hidden:
        assert path.name not in names, path
    assert not {"build_data.py", "reviews.py", "task.toml"} & names
    held = set().union(*(_texts(p) for p in hidden if p.suffix == ".jsonl"))
    for rel in in_workspace:
        if rel.suffix in (".jsonl", ".txt"):  # not one held-out review, anywhere in the data
            assert not _texts(workspace / rel) & held, rel
    # What the recipe starts from is all there, next to what it wrote.
    starter = {p.relative_to(task.root / "starter") for p in _files([task.root / "starter"])}
    assert starter <= in_workspace
    assert (workspace / "submission" / "model.safetensors").is_file()


# --- crafted bad submissions are refused before scoring ----------------------------------


def _bert(folder: Path, labels: list[str], **shape: int) -> Path:
    """A real BertForSequenceClassification of the given shape, saved like a submission."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=168,
        max_position_embeddings=48,
        type_vocab_size=1,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)},
        **shape,
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(BUILTIN_TASKS_DIR / "classify-finetune/starter/base_model")
    tok.save_pretrained(folder)
    return folder


COMPRESS_LABELS = [
    f"{t}/{s}" for t in ("food", "film", "hotel", "phone") for s in ("negative", "positive")
]
MERGE_LABELS = [
    "sentiment:negative",
    "sentiment:positive",
    "topic:food",
    "topic:film",
    "topic:hotel",
    "topic:phone",
]


def _refused(task: TaskSpec, artifact: Path, work: Path) -> list[str]:
    outcome = _evaluate(task, artifact, work)
    assert not outcome.ok and outcome.score is None, outcome
    assert outcome.violations, outcome  # refused for its rules, not failed for another reason
    return outcome.violations


def test_compress_refuses_the_teacher_itself_over_the_budget(tmp_path: Path) -> None:
    task = load_task(BUILTIN_TASKS_DIR / "compress-budget")
    teacher = task.root / "starter" / "teacher"
    assert _refused(task, teacher, tmp_path / "eval") == [
        "max_parameters: the model has 541,704 parameters, more than the 100,000 allowed",
        "max_load_memory_gb: the weights need 0.00217 GB to load, more than the 0.0004 GB allowed",
    ]


def test_compress_refuses_quantized_weights_under_the_budget(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    task = load_task(BUILTIN_TASKS_DIR / "compress-budget")
    model = _bert(tmp_path / "int8", COMPRESS_LABELS, hidden_size=32, num_hidden_layers=1,
                  num_attention_heads=2, intermediate_size=64)  # fmt: skip
    weights = load_file(str(model / "model.safetensors"))
    scale = weights["bert.encoder.layer.0.intermediate.dense.weight"].abs().max() / 127
    q = (weights["bert.encoder.layer.0.intermediate.dense.weight"] / scale).round().to(torch.int8)
    weights["bert.encoder.layer.0.intermediate.dense.weight"] = q
    save_file(weights, str(model / "model.safetensors"))
    (violation,) = _refused(task, model, tmp_path / "eval")
    assert violation.startswith("forbid_quantized: quantized weights are not allowed")
    assert "bert.encoder.layer.0.intermediate.dense.weight (I8)" in violation


def test_merge_refuses_a_model_not_of_the_base_architecture(tmp_path: Path) -> None:
    task = load_task(BUILTIN_TASKS_DIR / "merge-models")
    wide = _bert(tmp_path / "wide", MERGE_LABELS, hidden_size=128, num_hidden_layers=2,
                 num_attention_heads=2, intermediate_size=256)  # fmt: skip
    violations = _refused(task, wide, tmp_path / "eval-wide")
    assert any(
        v.startswith("allowed_base_models:") and "'hidden_size': 128" in v for v in violations
    )
    # The base's shape, but both experts' feed-forward layers side by side: too many parameters.
    stacked = _bert(tmp_path / "stacked", MERGE_LABELS, hidden_size=64, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=512)  # fmt: skip
    assert _refused(task, stacked, tmp_path / "eval-stacked") == [
        "max_parameters: the model has 184,582 parameters, more than the 118,534 allowed"
    ]


def test_merge_without_both_label_sets_is_not_scored(tmp_path: Path) -> None:
    task = load_task(BUILTIN_TASKS_DIR / "merge-models")
    expert = task.root / "starter" / "models" / "sentiment"
    outcome = _evaluate(task, expert, tmp_path / "eval")
    assert not outcome.ok and outcome.score is None and outcome.violations == []
    assert outcome.error and "config.id2label has no label 'topic:" in outcome.error


def test_classify_refuses_another_base_model_and_pickled_weights(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    task = load_task(BUILTIN_TASKS_DIR / "classify-finetune")
    other = tmp_path / "teacher"
    shutil.copytree(BUILTIN_TASKS_DIR / "compress-budget" / "starter" / "teacher", other)
    (violation,) = _refused(task, other, tmp_path / "eval-other")
    assert violation.startswith("allowed_base_models:") and "'num_hidden_layers': 3" in violation

    # The base model itself, its weights pickled: the limits cannot be read without unpickling.
    pickled = tmp_path / "pickled"
    shutil.copytree(task.root / "starter" / "base_model", pickled)
    torch.save(load_file(str(pickled / "model.safetensors")), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    violations = _refused(task, pickled, tmp_path / "eval-pickled")
    assert violations and "must be in safetensors format" in violations[0]
