"""A search with no LLM on a real task: the README's `mlra run tiny-lm --model baseline
--search greedy --attempts 3`, end to end through the CLI (real training, real lm-eval
validation and grading, each attempt in a bubblewrap sandbox of its own), made once for
the session (tests/readme_runs.py).

What a user sees: three attempts, the first two the task's first recipe variants (the
drafts), the third a variant of the better of them; each validated on the hidden
validation split; the best one submitted, and only that one graded on the test split;
result.json's `attempts` and the transcript say so.
"""

from __future__ import annotations

import json

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.tasks.spec import BUILTIN_TASKS_DIR, load_task
from tests.readme_runs import ReadmeRun


@pytest.mark.slow
def test_a_greedy_search_over_tiny_lms_recipe_submits_its_best_validated_attempt(
    readme_search_run: ReadmeRun,
) -> None:
    task = load_task(BUILTIN_TASKS_DIR / "tiny-lm")
    proc, run_dir = readme_search_run.proc, readme_search_run.run_dir
    events = read_events(run_dir / "events.jsonl")
    started = [e for e in events if isinstance(e, ev.AttemptStarted)]
    finished = {e.attempt: e for e in events if isinstance(e, ev.AttemptFinished)}

    # Three attempts: the task's first two recipe variants, then an untried variant
    # improving the better of them; all validated with a score.
    assert [s.attempt for s in started] == ["a1", "a2", "a3"]
    assert [s.variant for s in started[:2]] == task.baseline.variants[:2]
    assert started[2].variant in task.baseline.variants[2:]
    assert sorted(finished) == ["a1", "a2", "a3"]
    for attempt in finished.values():
        assert attempt.status == "validated", attempt.why
        assert attempt.score is not None and 0.5 < attempt.score <= 1.0
        assert attempt.metric == "minimal_pair_accuracy" and attempt.kept
    scores = {a: f.score for a, f in finished.items() if f.score is not None}
    drafts = {a: scores[a] for a in ("a1", "a2")}
    assert started[2].parent == max(drafts, key=lambda a: drafts[a])

    # The best validated attempt is submitted: its frozen copy, graded on the test split.
    (submission,) = [e for e in events if isinstance(e, ev.Submission)]
    best = submission.attempt
    assert best is not None and scores[best] == max(scores.values())
    assert submission.by == "agent"
    assert submission.frozen == finished[best].kept
    (graded,) = [e for e in events if isinstance(e, ev.EvaluationFinished)]
    assert graded.ok and graded.score is not None and 0.5 < graded.score <= 1.0
    assert graded.metric == "minimal_pair_accuracy"

    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "finished" and result["reason"] == "submitted"
    assert result["score"] == graded.score and result["tokens"] == 0
    summary = result["attempts"]
    assert (summary["tried"], summary["validated"], summary["buggy"]) == (3, 3, 0)
    assert summary["best"] == summary["submitted"] == best
    assert summary["best_validation"] == summary["submitted_validation"] == scores[best]
    assert summary["test_score"] == graded.score
    assert summary["validation_to_test_gap"] == pytest.approx(graded.score - scores[best], abs=1e-6)

    # Each attempt is a run of its own, validated and never graded on the test split.
    for attempt in ("a1", "a2", "a3"):
        folder = run_dir / "attempts" / attempt
        own = read_events(folder / "events.jsonl")
        assert any(isinstance(e, ev.Validation) and e.split == "validation" for e in own)
        assert not any(isinstance(e, ev.EvaluationFinished) for e in own)
        assert (folder / "workspace" / "submission" / "config.json").is_file()

    # The transcript: each attempt's validation, and the score naming the graded attempt.
    out = proc.stdout
    for attempt in ("a1", "a2", "a3"):
        assert f"attempt {attempt} validated" in out
    (score_line,) = [line for line in out.splitlines() if "score: minimal_pair_accuracy" in line]
    assert f"attempt {best}" in score_line and "gap" in score_line
