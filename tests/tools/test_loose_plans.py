"""A small supervisor's plan, written loosely, is the plan it meant: refused, such a
model spends its turns rewriting the plan instead of handing out subtasks."""

from __future__ import annotations

import json

from mlra.events import PlanStep
from mlra.tools.plan import UpdatePlan, render_plan
from mlra.tools.registry import validated


def _read(arguments: dict[str, object]) -> tuple[list[tuple[str, str, str]] | None, str | None]:
    args, problem = validated(UpdatePlan(lambda _steps, _reason: None), arguments)
    if args is None:
        return None, problem
    return [(s.id, s.title, s.status) for s in args.steps], None


def test_a_list_of_strings_is_a_plan_numbered_from_one() -> None:
    steps, problem = _read({"steps": ["Train the baseline", "Evaluate it"]})
    assert problem is None
    assert steps == [("1", "Train the baseline", "pending"), ("2", "Evaluate it", "pending")]


def test_loose_steps_are_read_as_meant() -> None:
    steps, problem = _read(
        {
            "steps": [
                {"id": 1, "title": "Read the task", "status": "completed"},
                {"description": "Train", "status": "in progress"},
                {"step": "Submit", "status": "To-Do"},
            ]
        }
    )
    assert problem is None
    assert steps == [
        ("1", "Read the task", "done"),
        ("2", "Train", "in_progress"),
        ("3", "Submit", "pending"),
    ]


def test_a_plan_sent_as_a_json_string_is_read() -> None:
    encoded = json.dumps([{"id": "a", "title": "Tokenize"}, "Pretrain"])
    steps, problem = _read({"steps": encoded, "reason": "first plan"})
    assert problem is None
    assert steps == [("a", "Tokenize", "pending"), ("2", "Pretrain", "pending")]


def test_a_step_number_is_an_id_never_a_title() -> None:
    steps, problem = _read(
        {
            "steps": [
                {"step": "1", "description": "Train the baseline"},
                {"step": 2, "description": "Evaluate"},
                {"step": "Step 3", "task": "Submit"},
                {"id": 4.0, "step": "Write the report"},
            ]
        }
    )
    assert problem is None
    assert steps == [
        ("1", "Train the baseline", "pending"),
        ("2", "Evaluate", "pending"),
        ("3", "Submit", "pending"),
        ("4", "Write the report", "pending"),
    ]


def test_steps_without_ids_take_numbers_no_step_has() -> None:
    """Numbered by position alone, `[{"id": "3"}, "B", "C"]` was refused as "step id '3'
    is used twice", an id the model wrote once."""
    steps, problem = _read({"steps": [{"id": "3", "title": "A"}, "B", "C"]})
    assert problem is None
    assert steps == [("3", "A", "pending"), ("2", "B", "pending"), ("4", "C", "pending")]


def test_what_cannot_be_read_is_still_refused_naming_what_it_takes() -> None:
    for arguments, words in (
        ({"steps": [{"id": "1", "title": "Train", "status": "blocked"}]}, "'pending'"),
        ({"steps": []}, "a plan needs at least one step"),
        ({"steps": [{"id": "1", "title": "A"}, {"id": 1, "title": "B"}]}, "'1' is used twice"),
        ({"steps": [{"id": float("nan"), "title": "Train"}]}, "steps.0.id: Input should be"),
        ({"steps": "train, then evaluate"}, "steps: Input should be a valid list"),
        ({"steps": [{"id": "1"}]}, "steps.0.title: Field required"),
    ):
        steps, problem = _read(arguments)
        assert steps is None and problem is not None
        assert words in problem and "update_plan takes: steps, reason" in problem, problem


def test_the_plan_shown_is_the_plan_read() -> None:
    args, _ = validated(
        UpdatePlan(lambda _steps, _reason: None),
        {"steps": ["Train", {"title": "Evaluate", "status": "done"}]},
    )
    assert args is not None
    shown = render_plan([PlanStep(**s.model_dump()) for s in args.steps])
    assert shown == "[ ] 1. Train\n[x] 2. Evaluate"


def test_the_transcript_counts_the_steps_the_tool_reads() -> None:
    from mlra.console.text.event_lines import _describe_call

    encoded = json.dumps(["Tokenize", "Pretrain", "Evaluate"])
    assert _describe_call("update_plan", {"steps": encoded}, None, None) == (
        "update_plan (3 steps)"
    )


def test_a_number_too_long_to_read_is_an_error_not_a_crash() -> None:
    from mlra.tools.registry import parse_arguments

    raw = '{"steps": [{"id": ' + "1" * 5000 + ', "title": "Train"}]}'
    assert parse_arguments(raw) == (None, "the arguments hold a number too long to read")
