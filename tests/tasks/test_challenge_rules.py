"""Each benchmark task's challenge rules, listed as checked by mlra or trusted (issue 30).

What a user notices: `mlra tasks show` lists every rule of the challenge with how mlra
checks it or why it cannot; a submission that breaks a checked rule is refused in the
rule's own words; result.json says how many rules were checked and which were only
trusted; a task.toml that claims a check mlra does not make is refused, in one line.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.run_result import result_of
from mlra.agent.record.state import fold
from mlra.tasks.challenge import Challenge, ChallengeRule, quote_rules
from mlra.tasks.constraints import check
from mlra.tasks.grading import grade
from mlra.tasks.spec import BUILTIN_TASKS_DIR, TaskError, load_task
from tests.conftest import mlra_cli
from tests.tasks.test_benchmark_tasks import _claims, _llama

RULE = """
[[challenge.rules]]
text = "The model's parameter size is not larger than 8 billion"
source = "the rules page"
status = "{status}"
how = "counted from the safetensors headers"
checks = [{checks}]
"""


def _task_with(tmp_path: Path, extra: str, *, base: str = "llm-merging") -> Path:
    """A copy of a built-in task whose task.toml has its [challenge] replaced by `extra`."""
    folder = tmp_path / base
    shutil.copytree(BUILTIN_TASKS_DIR / base, folder)
    toml = folder / "task.toml"
    text = toml.read_text()
    if "\n[challenge]" in text:
        text = text[: text.index("\n[challenge]")]
    toml.write_text(text.replace("network = true", "network = false") + "\n" + extra)
    return folder


def test_tasks_show_lists_each_rule_as_checked_or_trusted() -> None:
    shown = mlra_cli(["tasks", "show", "llm-merging"], cwd=Path.cwd())
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "Rules (" in out
    assert "✓ checked: The model's parameter size is not larger than 8 billion" in out
    assert "· trusted: The model is uploaded before May 31st 2024" in out
    # Each rule says how it is checked or why it is not.
    assert "how: parameters counted from the safetensors headers" in out
    assert "why: upload dates are the Hub's" in out


def test_the_prompt_says_which_rules_are_checked_and_which_are_trusted() -> None:
    prompt = load_task(BUILTIN_TASKS_DIR / "llm-merging").render_prompt()
    rules = prompt[prompt.index("## Rules") : prompt.index("## Notes")]
    assert "Checked before scoring (a submission that breaks one gets no score):" in rules
    assert "- The model's parameter size is not larger than 8 billion" in rules
    assert "Not checkable here (or only in part), and trusted to you:" in rules
    assert "- You may not train on MMLU directly" in rules


@pytest.mark.parametrize(
    ("extra", "field", "problem"),
    [
        (RULE.format(status="maybe", checks=""), "challenge.rules.0.status", "Input should be"),
        (
            RULE.format(status="checked", checks='"max_load_memory_gb"'),
            "challenge.rules.0.checks",
            "'max_load_memory_gb' is a [constraints] field this task leaves unset",
        ),
        (
            RULE.format(status="checked", checks='"vibes"'),
            "challenge.rules.0.checks",
            "'vibes' is not a check mlra has",
        ),
        (
            RULE.replace('how = "counted from the safetensors headers"\n', "").format(
                status="trusted", checks=""
            ),
            "challenge.rules.0.how",
            "is required but missing",
        ),
        (
            '[challenge]\nown_metric = "accuracy"\n',
            "challenge.own_metric",
            "only where `differs` says why",
        ),
    ],
)
def test_a_rule_that_claims_too_much_is_refused_in_one_line(
    tmp_path: Path, extra: str, field: str, problem: str
) -> None:
    folder = _task_with(tmp_path, extra)
    with pytest.raises(TaskError) as caught:
        load_task(folder)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{folder / 'task.toml'}: field {field}: "), message
    assert problem in message


def test_a_violation_is_quoted_with_the_rule_that_names_its_check() -> None:
    challenge = Challenge(
        rules=[
            ChallengeRule(
                text="Not larger than 8 billion",
                source="rules page",
                status="checked",
                how="headers",
                checks=["allowed_base_models"],
            ),
            ChallengeRule(text="Be nice", source="rules page", status="trusted", how="cannot"),
        ]
    )
    quoted = quote_rules(
        ["allowed_base_models: too big", "weights: unreadable", "no model weights found"],
        challenge,
    )
    assert quoted == [
        'breaks the challenge\'s rule "Not larger than 8 billion" (rules page): '
        "allowed_base_models: too big",
        "weights: unreadable",
        "no model weights found",
    ]
    assert quote_rules(quoted, challenge) == quoted  # quoted once, however often it passes


async def test_a_broken_rule_is_refused_in_its_words_and_result_json_counts_the_rules(
    tmp_path: Path,
) -> None:
    """A 9B Llama for llm-merging: refused before lm-eval runs, with the challenge's own
    words; the grade (and so result.json) records the checked and trusted rules."""
    task = load_task(BUILTIN_TASKS_DIR / "llm-merging")
    workspace = tmp_path / "workspace"
    _claims(workspace / "submission", 36)  # 9B F32 parameters, on paper
    _, finished = await grade(task, workspace, None, tmp_path / "eval")
    assert not finished.ok and finished.score is None
    (violation,) = finished.violations
    assert violation.startswith(
        "breaks the challenge's rule \"The model's parameter size is not larger than 8 billion\""
    )
    assert "this one has 9B" in violation
    assert finished.rules is not None
    assert finished.rules.checked >= 1 and finished.rules.trusted >= 1
    assert "The model is uploaded before May 31st 2024" in finished.rules.trusted_rules

    result = result_of(fold([finished]))
    assert result.rules == finished.rules
    dumped = result.model_dump(mode="json")["rules"]
    assert dumped["checked"] == finished.rules.checked
    assert "The model is uploaded before May 31st 2024" in dumped["trusted_rules"]


def test_a_task_that_lists_no_rules_records_none() -> None:
    assert Challenge().summary() is None
    finished = ev.EvaluationFinished(ok=True, metric="acc", score=0.5)
    assert result_of(fold([finished])).rules is None


def test_a_differing_grade_reports_the_challenges_own_metric_beside_it() -> None:
    challenge = Challenge(
        differs="mlra scores accuracy times an efficiency factor",
        own_metric="accuracy",
        rules=[ChallengeRule(text="FP16 or FP32", source="s", status="trusted", how="h")],
    )
    summary = challenge.summary({"accuracy": 0.61, "edge/throughput": 12.0})
    assert summary is not None
    assert (summary.differs, summary.own_metric, summary.own_score) == (
        "mlra scores accuracy times an efficiency factor",
        "accuracy",
        0.61,
    )


# --- llm-merging and llm-efficiency: what each kind of submission gets -------------------


def _model(
    folder: Path, model_type: str, parameters: int = 1024, config: dict[str, object] | None = None
) -> Path:
    """A submission whose safetensors header declares `parameters` F16 weights (nothing
    allocated: the rules read headers and config.json only) and whose config.json says
    `model_type` and `config`."""
    folder.mkdir(parents=True)
    header = json.dumps(
        {
            "model.embed_tokens.weight": {
                "dtype": "F16",
                "shape": [parameters],
                "data_offsets": [0, parameters * 2],
            }
        }
    ).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    (folder / "config.json").write_text(json.dumps({"model_type": model_type, **(config or {})}))
    return folder


def _refusals(task: str, folder: Path) -> list[str]:
    """The rules `folder` breaks for `task`, as the evaluation runner reports them."""
    spec = load_task(BUILTIN_TASKS_DIR / task)
    return quote_rules(check(folder, spec.constraints)[0], spec.challenge)


SIZE_RULE = (
    "breaks the challenge's rule \"The model's parameter size is not larger than 8 billion\""
)
LIST_RULE = "breaks the challenge's rule \"You must start with a base model from our approved list"
BASE_RULE = (
    "breaks the challenge's rule \"The starting model for the competition should be an open "
    'base model without instruction-tuning"'
)


@pytest.mark.parametrize(
    ("name", "model_type", "parameters"),
    [
        ("Qwen1.5-7B", "qwen2", 7_721_324_544),
        ("Llama-3-8B", "llama", 8_030_261_248),
        ("Mistral-7B-v0.1", "mistral", 7_241_732_096),
        ("Gemma-7B", "gemma", 8_537_680_896),
        ("Phi-2", "phi", 2_779_683_840),
    ],
)
def test_llm_merging_admits_any_public_family_of_the_size_class(
    tmp_path: Path, name: str, model_type: str, parameters: int
) -> None:
    """The competition allows any public model of at most 8 billion parameters (its
    families are suggestions): a Qwen1.5-7B, refused before, is admitted."""
    assert _refusals("llm-merging", _model(tmp_path / name, model_type, parameters)) == []


def test_llm_merging_refuses_a_model_past_the_size_class_in_the_rules_words(
    tmp_path: Path,
) -> None:
    (qwen,) = _refusals("llm-merging", _model(tmp_path / "q14", "qwen2", 14_167_290_880))
    assert qwen.startswith(SIZE_RULE)
    assert "at most 8.1B parameters; this one has 14.2B" in qwen
    (gemma,) = _refusals("llm-merging", _model(tmp_path / "g9", "gemma", 9_241_705_984))
    assert gemma.startswith(SIZE_RULE) and "a Gemma family model may have at most 8.54B" in gemma


def test_llm_merging_degenerate_submissions(tmp_path: Path) -> None:
    """What each degenerate submission gets before lm-eval runs, and why:
    - one expert as downloaded (or the unchanged base model): admitted, graded on MMLU
      like any model; "merging expert models" is a trusted rule, since telling a merge
      from one expert needs the experts' weights, which the grader does not hold;
    - a randomly initialised model of an admitted family: admitted; lm-eval scores it
      near MMLU's chance level (0.25, four choices);
    - an empty folder: refused, no weights;
    - pickled weights only: refused (safetensors are what the size is counted from)."""
    expert = _llama(tmp_path / "expert")  # a tiny Llama: any expert looks the same to the rules
    assert _refusals("llm-merging", expert) == []
    trusted = load_task(BUILTIN_TASKS_DIR / "llm-merging").challenge.summary()
    assert trusted is not None
    assert "Create a generalist model by merging expert models" in trusted.trusted_rules

    (tmp_path / "empty").mkdir()
    empty = _refusals("llm-merging", tmp_path / "empty")
    assert empty[0] == "no model weights found (no *.safetensors file in the submission)"
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "pytorch_model.bin").write_bytes(b"\0" * 16)
    (pickled / "config.json").write_text('{"model_type": "llama"}')
    (message,) = _refusals("llm-merging", pickled)
    assert message.startswith("require_safetensors: weights must be in safetensors format")


LLAMA2 = {"vocab_size": 32000, "rope_theta": 10000.0, "hidden_size": 4096}


@pytest.mark.parametrize(
    ("name", "model_type", "config"),
    [
        ("Llama-2-7b-hf", "llama", LLAMA2),
        ("open_llama_7b", "llama", LLAMA2),
        ("Colossal-LLaMA-2-7b-base", "llama", LLAMA2 | {"vocab_size": 69104}),
        ("Mistral-7B-v0.1", "mistral", {"vocab_size": 32000, "rope_theta": 10000.0}),
        ("pythia-1b", "gpt_neox", {"vocab_size": 50304}),
        ("falcon-7b", "falcon", {"vocab_size": 65024}),
    ],
)
def test_llm_efficiency_admits_the_challenges_base_models(
    tmp_path: Path, name: str, model_type: str, config: dict[str, object]
) -> None:
    folder = _model(tmp_path / name, model_type, config=config)
    (folder / "README.md").write_text(f"---\nbase_model: x/{name}\n---\n")
    assert _refusals("llm-efficiency", folder) == []


@pytest.mark.parametrize(
    ("name", "model_type", "config", "why"),
    [
        # transformers 4.x writes rope_theta at the top; 5.x in rope_parameters.
        ("Llama-3-8B", "llama", {"vocab_size": 128256, "rope_theta": 500000.0}, "vocab_size"),
        (
            "Llama-3.1-8B",
            "llama",
            {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0}},
            "rope_parameters.rope_theta = 500000.0",
        ),
        ("Mistral-7B-v0.3", "mistral", {"vocab_size": 32768}, "Mistral v0.2 or later"),
        ("Mistral-7B-v0.2", "mistral", {"rope_theta": 1000000.0}, "rope_theta = 1000000.0"),
    ],
)
def test_llm_efficiency_refuses_later_generations_in_the_rules_words(
    tmp_path: Path, name: str, model_type: str, config: dict[str, object], why: str
) -> None:
    (message,) = _refusals("llm-efficiency", _model(tmp_path / name, model_type, config=config))
    assert message.startswith(LIST_RULE), message
    assert "refused_models: the model is" in message and why in message


@pytest.mark.parametrize("name", ["Qwen1.5-7B", "Qwen2-7B", "Qwen2.5-7B"])
def test_llm_efficiency_refuses_qwen2_type_models(tmp_path: Path, name: str) -> None:
    """The challenge's Qwen is the original Qwen-7B/14B (remote code, not loadable here);
    Qwen1.5 and later (transformers' qwen2 type) came out after it."""
    (message,) = _refusals("llm-efficiency", _model(tmp_path / name, "qwen2"))
    assert message.startswith(LIST_RULE)
    assert "allowed_base_models: the model's architecture {'model_type': 'qwen2'" in message


@pytest.mark.parametrize(
    ("where", "name", "hub_id"),
    [
        ("config", "meta-llama/Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b-chat-hf"),
        (
            "config",
            "/root/.cache/huggingface/hub/models--mistralai--Mistral-7B-Instruct-v0.1/snapshots/7a",
            "mistralai/Mistral-7B-Instruct-v0.1",
        ),
        ("card", "google/gemma-7b-it", "google/gemma-7b-it"),
        ("card-list", "lmsys/vicuna-7b-v1.5", "lmsys/vicuna-7b-v1.5"),
    ],
)
def test_llm_efficiency_refuses_an_instruction_tuned_start_its_files_name(
    tmp_path: Path, where: str, name: str, hub_id: str
) -> None:
    config: dict[str, object] = dict(LLAMA2)
    if where == "config":
        config["_name_or_path"] = name  # what transformers before 5.0 saved
    folder = _model(tmp_path / "m", "llama", config=config)
    if where == "card":
        (folder / "README.md").write_text(f"---\nlicense: other\nbase_model: {name}\n---\n# x\n")
    elif where == "card-list":
        (folder / "README.md").write_text(f"---\nbase_model:\n- '{name}'\n---\n")
    (message,) = _refusals("llm-efficiency", folder)
    assert message.startswith(BASE_RULE), message
    assert f"instruction_tuned_names: the submission's files name '{hub_id}'" in message


def test_llm_efficiency_a_local_folders_name_is_not_a_checkpoint(tmp_path: Path) -> None:
    """The agent's own folders (`out-chat/`, `./sft-ckpt`) say nothing of the starting
    checkpoint; only Hub ids are read as one."""
    for local in ("out-chat", "./sft-instruct", "/workspace/chat-run"):
        folder = _model(tmp_path / local.strip("./").replace("/", "_"), "llama", config=LLAMA2)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(config | {"_name_or_path": local}))
        assert _refusals("llm-efficiency", folder) == [], local


def test_llm_efficiency_degenerate_submissions(tmp_path: Path) -> None:
    """- the unchanged base model (a Llama 2-shaped model, nothing trained): admitted and
      graded on MMLU like any model: the challenge asks for fine-tuning, but a base model
      is a legal starting point and its score is the honest floor (no reference scores:
      the normalized score and success stay unset);
    - a random model of an approved family: admitted, scored near chance (0.25);
    - an empty folder: refused, no weights; a Phi model: refused, not on the list."""
    base = _llama(tmp_path / "base")
    assert _refusals("llm-efficiency", base) == []
    (tmp_path / "empty").mkdir()
    empty = _refusals("llm-efficiency", tmp_path / "empty")
    assert empty[0] == "no model weights found (no *.safetensors file in the submission)"
    (phi,) = _refusals("llm-efficiency", _model(tmp_path / "phi", "phi"))
    assert phi.startswith(LIST_RULE)


def test_the_refused_model_and_instruction_name_fields_refuse_bad_values(tmp_path: Path) -> None:
    folder = _task_with(tmp_path, "", base="llm-efficiency")
    toml = folder / "task.toml"
    text = toml.read_text()
    toml.write_text(
        text.replace(
            "instruction_tuned_names = '(instruct", "instruction_tuned_names = '((instruct"
        )
    )
    with pytest.raises(
        TaskError, match=r"field constraints.instruction_tuned_names: .*not a regular expression"
    ):
        load_task(folder)


@pytest.mark.slow
async def test_degenerate_merges_get_an_mmlu_score_on_the_stand_in(tmp_path: Path) -> None:
    """One expert as downloaded and a randomly initialised model, graded as llm-merging
    grades (fresh process, rules first, lm-eval on an MMLU stand-in): both are admitted
    and scored, as the rules allow; the grade says which rules it only trusted."""
    from tests.tasks.test_benchmark_tasks import _group_standin, _standin_copy

    folder = _standin_copy("llm-merging", tmp_path, evaluator_lines='include = "standin"\n')
    _group_standin(
        folder / "standin", "mmlu", {"mmlu_standin_a": 8, "mmlu_standin_b": 8}, weight_by_size=True
    )
    task = load_task(folder)
    scores = {}
    # A tiny Llama stands for the downloaded expert; the random model is drawn wider.
    for name, init in (("expert", 0.02), ("random", 0.5)):
        model = _llama(tmp_path / "models" / name, initializer_range=init)
        workspace = tmp_path / name / "workspace"
        shutil.copytree(model, workspace / "submission")
        _, finished = await grade(task, workspace, None, tmp_path / name / "eval")
        assert finished.ok, finished.error
        assert finished.score is not None and 0 <= finished.score <= 1
        assert finished.normalized is None and finished.success is None  # no references
        assert finished.rules is not None
        assert "Create a generalist model by merging expert models" in finished.rules.trusted_rules
        scores[name] = finished.score
    assert set(scores) == {"expert", "random"}


def test_a_refused_model_that_names_no_config_value_is_refused(tmp_path: Path) -> None:
    folder = _task_with(tmp_path, "", base="llm-efficiency")
    toml = folder / "task.toml"
    text = toml.read_text()
    start = text.index("config_any = { vocab_size = [128256]")
    end = text.index("\n", start)
    toml.write_text(text[:start] + "config_any = { vocab_size = [] }" + text[end:])
    with pytest.raises(TaskError) as caught:
        load_task(folder)
    assert "field constraints.refused_models.0.config_any: " in str(caught.value)
    assert "lists no config value that identifies the model" in str(caught.value)
