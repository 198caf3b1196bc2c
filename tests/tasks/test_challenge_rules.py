"""Each benchmark task's challenge rules, listed as checked by mlra or trusted (issue 30).

What a user notices: `mlra tasks show` lists every rule of the challenge with how mlra
checks it or why it cannot; a submission that breaks a checked rule is refused in the
rule's own words; result.json says how many rules were checked and which were only
trusted; a task.toml that claims a check mlra does not make is refused, in one line.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.state import fold, result_of
from mlra.tasks.challenge import Challenge, ChallengeRule, quote_rules
from mlra.tasks.grading import grade
from mlra.tasks.spec import BUILTIN_TASKS_DIR, TaskError, load_task
from tests.conftest import mlra_cli
from tests.tasks.test_benchmark_tasks import _claims

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
    assert "Not checkable here, and trusted to you:" in rules
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
            RULE.format(status="trusted", checks='"allowed_base_models"'),
            "challenge.rules.0.checks",
            "a trusted rule names no checks",
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
