"""`validate` (issue 16): a frozen copy graded host-side on the task's validation
split while the run goes on, rate-limited by `[validation]`; the format-and-rules
check of a task without validation data; the opt-in grading of the best validated
artifact at the deadline; validation data kept apart from the agent's and the
test's; and the baseline agent's `--baseline-validate`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import ValidationSettings, builtin_task_dirs, load_task
from mlra.tasks.validation import better, refusal
from tests.conftest import (
    TEST_IMAGE,
    answer_copy,
    deadline_inside_the_held_call,
    docker_address,
    docker_problem,
    mlra_cli,
    run_baseline,
)
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn


def _run(
    tmp_path: Path,
    task: Path,
    script: Mapping[str, Any],
    *extra: str,
    env: Mapping[str, str] | None = None,
) -> Path:
    with ScriptedModelServer(script) as server:
        proc = mlra_cli(
            [
                "run",
                str(task),
                "--model",
                "openai/test-model",
                "--base-url",
                server.url_for("openai"),  # type: ignore[arg-type]
                "--no-tui",
                "--runs-dir",
                str(tmp_path / "runs"),
                *extra,
            ],
            cwd=tmp_path,
            env=env,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    return run_dir


def _task_copy(answer_task: Path, tmp_path: Path, old: str, new: str) -> Path:
    """The answer task with one line of its `[validation]` changed."""
    return answer_copy(tmp_path / "task", (old, new), source=answer_task)


def _results(events: list[ev.Event], tool: str) -> list[ev.ToolResult]:
    return [e for e in events if isinstance(e, ev.ToolResult) and e.tool == tool]


def test_a_scripted_run_validates_and_hits_the_rate_limit(
    tmp_path: Path, answer_task: Path
) -> None:
    """The validation split's score (0.5) is what the agent reads, not the test split's
    (1.0, the final grade); a second call within the interval is an error observation
    saying when the next is allowed."""
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("Answer.", call("bash", command="echo 42 > answer.txt")),
            turn("Check it.", call("validate")),
            turn("Again.", call("validate", path="answer.txt")),
            turn("Nothing there.", call("validate", path="missing.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    run_dir = _run(tmp_path, answer_task, script)
    events = read_events(run_dir / "events.jsonl")

    (validation,) = [e for e in events if isinstance(e, ev.Validation)]
    assert validation.split == "validation" and validation.ok
    assert validation.score == 0.5 and validation.metric == "exact_match"
    assert validation.artifact == "answer.txt" and validation.sha256
    assert validation.kept is None  # the task does not opt in: no copy is kept
    assert not (run_dir / "validations" / "1" / "artifact").exists()

    first, second, missing = _results(events, "validate")
    assert first.ok and first.call_id == validation.call_id
    assert "Validation split (not the hidden test split): exact_match = 0.5000" in first.output
    assert "1 validation left" in first.output
    assert not second.ok and "at least 1h00m apart on the run clock" in second.output
    assert "the next is allowed in" in second.output and "(at run time 1h00m)" in second.output
    assert not missing.ok and "so nothing was validated" in missing.output

    finished = next(e for e in events if isinstance(e, ev.EvaluationFinished))
    assert finished.score == 1.0  # the hidden test split, on the submitted artifact
    result = json.loads((run_dir / "result.json").read_text())
    assert result["score"] == 1.0 and result["graded_best_validation"] is None


@pytest.mark.parametrize("opted_in", [True, False])
async def test_the_deadline_grades_the_best_validated_artifact_where_the_task_opts_in(
    tmp_path: Path, answer_task: Path, opted_in: bool
) -> None:
    """The agent validates 42, then spoils answer.txt and runs out of time: a task that
    opts in is graded on the kept copy of 42 (marked so); by default, on the workspace."""
    task = _task_copy(
        answer_task,
        tmp_path,
        'min_interval = "1h"',
        f'min_interval = "1h"\ngrade_best_at_deadline = {str(opted_in).lower()}',
    )
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("Answer.", call("bash", command="echo 42 > answer.txt")),
            turn("Check it.", call("validate")),
            turn("Spoil it.", call("bash", command="echo 41 > answer.txt")),
            turn("Wait.", call("bash", command="sleep 118.5", timeout=300)),
        ],
    }
    # The deadline falls while the agent waits, after it spoilt the answer, however long
    # the steps before took on a busy machine (a fixed 6 s limit could run out first).
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test-model", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer",
            model="openai/test-model",
            runs_dir=tmp_path / "runs",
            breakpoints=["bash:sleep 118.5"],
        )
        controller = RunController(config, load_task(task), provider)
        deadline_inside_the_held_call(controller)
        await controller.run(agent_for)
    run_dir = controller.run_dir
    events = read_events(run_dir / "events.jsonl")
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "deadline"
    (validation,) = [e for e in events if isinstance(e, ev.Validation)]
    submission = next(e for e in events if isinstance(e, ev.Submission))
    finished = next(e for e in events if isinstance(e, ev.EvaluationFinished))
    result = json.loads((run_dir / "result.json").read_text())
    if opted_in:
        assert validation.kept is not None and (run_dir / validation.kept).read_text() == "42\n"
        assert submission.best_validation == validation.call_id
        assert submission.frozen == validation.kept and submission.sha256 == validation.sha256
        assert finished.score == 1.0
        assert result["graded_best_validation"] == validation.call_id
    else:
        assert validation.kept is None and submission.best_validation is None
        assert finished.score == 0.0  # what the workspace holds: 41
        assert result["graded_best_validation"] is None


def test_without_validation_data_validate_checks_format_and_rules_only(
    tmp_path: Path, answer_task: Path
) -> None:
    """The baseline agent's `--baseline-validate` on a task with no validation split:
    the format check, said so, with no score; the run submits as before."""
    task = _task_copy(
        answer_task,
        tmp_path,
        'settings = { script = "hidden/check.py", args = ["hidden/validation.txt"] }\n',
        "",
    )
    run = run_baseline(task, tmp_path, "--baseline-validate")
    events = read_events(run.run_dir / "events.jsonl")
    (validation,) = [e for e in events if isinstance(e, ev.Validation)]
    assert validation.split == "format" and validation.ok and validation.score is None
    (result,) = _results(events, "validate")
    assert result.ok and result.output.startswith("Format check only")
    assert "answer.txt" in result.output and "passes" in result.output
    plan = [e for e in events if isinstance(e, ev.PlanUpdated)][-1]
    assert [s.id for s in plan.steps] == ["1", "validate", "submit"]
    assert all(s.status == "done" for s in plan.steps)
    finished = next(e for e in events if isinstance(e, ev.EvaluationFinished))
    assert finished.score == 1.0


def test_baseline_validate_grades_the_validation_split(tmp_path: Path, answer_task: Path) -> None:
    run = run_baseline(answer_task, tmp_path, "--baseline-validate")
    events = read_events(run.run_dir / "events.jsonl")
    (validation,) = [e for e in events if isinstance(e, ev.Validation)]
    assert validation.split == "validation" and validation.score == 0.5
    assert next(e for e in events if isinstance(e, ev.EvaluationFinished)).score == 1.0
    # Without the flag the baseline never validates.
    (tmp_path / "plain").mkdir()
    plain = run_baseline(answer_task, tmp_path / "plain")
    assert not [e for e in read_events(plain.run_dir / "events.jsonl") if e.type == "validation"]


def test_baseline_validate_is_for_the_baseline_agent(tmp_path: Path, answer_task: Path) -> None:
    proc = mlra_cli(
        ["run", str(answer_task), "--model", "openai/x", "--baseline-validate", "--no-tui"],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": "sk-test"},
    )
    assert proc.returncode == 2
    assert "--baseline-validate is for the baseline agent" in proc.stderr


def _validation(t: float, duration: float, score: float | None = 0.5) -> ev.Validation:
    event = ev.Validation(
        artifact="a", ok=score is not None, score=score, duration_s=duration, metric="m"
    )
    event.t = t
    return event


def test_the_rate_limit_counts_calls_and_spaces_their_starts() -> None:
    settings = ValidationSettings(max_calls=2, min_interval="10m")
    assert refusal(settings, [], 0.0) is None
    past = [_validation(t=100.0, duration=40.0)]  # started at 60 s
    said = refusal(settings, past, 300.0)
    assert said is not None and "allowed in 6m" in said and "at run time 11m" in said
    assert refusal(settings, past, 660.0) is None
    said = refusal(settings, [*past, _validation(t=900.0, duration=1.0)], 5000.0)
    assert said is not None and "used all 2 validations" in said


def test_the_best_validation_follows_the_metric_direction() -> None:
    low, high = _validation(1, 0, 0.2), _validation(2, 0, 0.7)
    assert better(high, low) and not better(low, high)
    low.higher_is_better = high.higher_is_better = False
    assert better(low, high) and not better(high, low)
    assert not better(_validation(3, 0, None), low)  # a failed validation never wins


def test_a_malformed_validation_section_is_refused(tmp_path: Path, answer_task: Path) -> None:
    from mlra.tasks.spec import TaskError

    task = _task_copy(answer_task, tmp_path, 'min_interval = "1h"', 'min_interval = "soon"')
    with pytest.raises(TaskError, match=r"validation\.min_interval"):
        load_task(task)


def _texts(path: Path) -> set[str]:
    if path.suffix == ".jsonl":
        lines = path.read_text(encoding="utf-8").splitlines()
        return {json.loads(line)["text"] for line in lines if line.strip()}
    return {line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}


VALIDATED_TASKS = ["classify-finetune", "compress-budget", "merge-models"]


@pytest.mark.parametrize("name", VALIDATED_TASKS)
def test_validation_data_shares_nothing_with_the_agents_files_or_the_test(name: str) -> None:
    """Every validation file is hidden from the agent, and no sentence of it is in the
    workspace's data or in the test data."""
    folder = next(d for d in builtin_task_dirs() if d.name == name)
    task = load_task(folder)
    settings = task.validation.settings
    assert settings is not None and task.validation.baseline is not None
    validation_files = [folder / str(rel) for rel in settings["tests"].values()]
    test_files = [folder / str(rel) for rel in task.evaluator.settings["tests"].values()]
    hidden = [p.resolve() for p in task.hidden_paths()]
    agent_files = [p for p in (folder / "starter").rglob("*") if p.suffix in (".jsonl", ".txt")]
    assert agent_files
    seen_by_agent = set().union(*(_texts(p) for p in agent_files))
    tested = set().union(*(_texts(p) for p in test_files))
    for path in validation_files:
        assert any(h in path.resolve().parents for h in hidden), path
        assert path not in test_files
        texts = _texts(path)
        assert len(texts) >= 500
        assert not texts & seen_by_agent, path
        assert not texts & tested, path


def test_tiny_lm_validation_text_is_neither_the_agents_nor_the_tests() -> None:
    """tiny-lm's validation split: lm-eval tasks of their own over text (and minimal
    pairs) found in no workspace file and in no test file."""
    folder = next(d for d in builtin_task_dirs() if d.name == "tiny-lm")
    task = load_task(folder)
    settings = task.validation.settings
    assert settings is not None and settings["primary"] == "tiny_lm_val_pairs/acc"
    include = folder / str(settings["include"])
    assert include.resolve() != (folder / str(task.evaluator.settings["include"])).resolve()
    assert {f"{t}.yaml" for t in settings["tasks"]} <= {
        p.name.lstrip("_") for p in include.glob("*.yaml")
    }
    validation = folder / "hidden" / "validation"
    assert any(h in validation.resolve().parents for h in task.hidden_paths())
    workspace = "".join(p.read_text() for p in (folder / "starter" / "data").glob("*.txt"))
    tested = "".join(p.read_text() for p in (folder / "hidden" / "data").rglob("*.jsonl"))
    rows = [
        json.loads(line)
        for path in sorted((validation / "pairs").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert len(rows) >= 300
    for row in rows:
        assert row["sentence_good"] not in workspace and row["sentence_good"] not in tested
    for line in (validation / "heldout.jsonl").read_text().splitlines():
        paragraphs = json.loads(line)["text"].split("\n\n")
        assert not [p for p in paragraphs if len(p) > 80 and (p in workspace or p in tested)]


def test_of_equal_validation_scores_the_later_artifact_is_kept() -> None:
    # The agent validated "24" and then "42" at the same score: the deadline fallback
    # grades its latest work, not the first copy it happened to validate.
    first, later = _validation(1, 0, 0.5), _validation(2, 0, 0.5)
    assert better(later, first)


LEAKY_CHECK = """\
import json, sys
from pathlib import Path

artifact, root, out = (Path(a) for a in sys.argv[1:4])
answers = (root / sys.argv[4]).read_text().split() if len(sys.argv) > 4 else ["42"]
given = artifact.read_text().strip()
if not given.isdigit():
    # A careless grader: it prints the hidden examples, then fails on them.
    print("validation examples:", (root / "hidden" / "examples.txt").read_text())
    raise ValueError("no answer among the hidden examples: " + (root / "hidden" / "examples.txt").read_text())
out.write_text(json.dumps({"score": sum(given == a for a in answers) / len(answers)}))
"""
SECRET_EXAMPLE = "the hidden validation example reads ZETA-7731 and must stay hidden"


def test_validate_tells_the_agent_no_hidden_text(tmp_path: Path, answer_task: Path) -> None:
    """A broken artifact makes a careless grader print the hidden examples and fail with a
    traceback of its hidden source: the agent reads the split's name and that it failed,
    never a line of the hidden files; the log keeps the evaluator's words whole."""
    task = _task_copy(answer_task, tmp_path, 'min_interval = "1h"', 'min_interval = "0.01s"')
    (task / "hidden" / "check.py").write_text(LEAKY_CHECK)
    (task / "hidden" / "examples.txt").write_text(SECRET_EXAMPLE + "\n")
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("Break it.", call("bash", command="echo not-a-number > answer.txt")),
            turn("Check it.", call("validate")),
            turn("Fix it.", call("bash", command="echo 42 > answer.txt")),
            turn("Check again.", call("validate")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    with ScriptedModelServer(script) as server:
        proc = mlra_cli(
            [
                "run", str(task), "--model", "openai/test-model",
                "--base-url", server.url_for("openai"), "--no-tui",
                "--runs-dir", str(tmp_path / "runs"),
            ],
            cwd=tmp_path, timeout=120,
        )  # fmt: skip
        worker_saw = json.dumps([r.body for r in server.requests_for("worker")])
        supervisor_saw = json.dumps([r.body for r in server.requests_for("supervisor")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    events = read_events(run_dir / "events.jsonl")
    broken, fixed = (e for e in events if isinstance(e, ev.Validation))
    assert fixed.ok and fixed.score == 0.5 and fixed.told is None
    # The log keeps what the evaluator said, for the user.
    assert broken.error is not None and "ZETA-7731" in broken.error
    assert broken.told is not None and "withheld" in broken.told
    first, second = _results(events, "validate")
    assert not first.ok and "gave no score" in first.output and "withheld" in first.output
    assert second.ok and "Validation split" in second.output and "0.5000" in second.output
    for seen in (first.output, first.error or "", worker_saw, supervisor_saw):
        assert "ZETA-7731" not in seen
        assert "no answer among the hidden examples" not in seen  # the grader's source
    result = json.loads((run_dir / "result.json").read_text())
    assert result["score"] == 1.0


@pytest.mark.parametrize(
    "sandbox",
    [
        "local",
        pytest.param(
            "docker",
            marks=pytest.mark.skipif(docker_problem() is not None, reason=docker_problem() or ""),
        ),
    ],
)
def test_a_validations_grader_draws_on_the_runs_memory(
    tmp_path: Path, answer_task: Path, sandbox: str
) -> None:
    """The grader reads what the agent made: a 200 MB answer.txt, read whole, is 400 MB of
    the grader's memory. It ran beside the run under a machine's worth of its own, so a
    run of 150 MB had its agent's data graded in twice that outside its budget; it is now
    made under the run's group, bounded by the run's memory, and says so."""
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", call("bash", command="head -c 200000000 /dev/zero | tr '\\0' 4 > answer.txt")),
            turn("", call("validate", path="answer.txt")),
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    extra = ["--memory", "150m", "--disk", "300m"]
    env: dict[str, str] = {}
    if sandbox == "docker":
        extra += ["--sandbox", "docker", "--image", TEST_IMAGE]
        env["DOCKER_HOST"] = docker_address() or ""
    run_dir = _run(tmp_path, answer_task, script, *extra, env=env)
    events = read_events(run_dir / "events.jsonl")
    started = events[0]
    assert isinstance(started, ev.RunStarted) and started.budget is not None
    if started.budget.held_by == "none":
        pytest.skip(f"the run's total is not held here: {started.budget.not_held}")
    (validation,) = [e for e in events if isinstance(e, ev.Validation)]
    assert not validation.ok and validation.score is None
    assert validation.error and "memory limit of 150 MB" in validation.error
    (told,) = _results(events, "validate")
    assert not told.ok and "memory limit of 150 MB" in told.output
    finished = next(e for e in events if isinstance(e, ev.EvaluationFinished))
    assert finished.score == 1.0  # the honest answer, graded after the run's processes ended
