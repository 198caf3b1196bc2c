"""The task format catches its own mistakes (issue 17): a reference score on the wrong
side of the baseline, a recipe that cannot run, an artifact not declared, a success
rule without what it needs, each refused at load time with one line naming the file
and the field; and the success rules themselves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlra.console.cli.cli import main
from mlra.tasks.checks import scripts_run
from mlra.tasks.grading import success_bar, success_of
from mlra.tasks.sections import Metric
from mlra.tasks.spec import TaskError, builtin_task_dirs, load_task
from tests.conftest import answer_copy

RECIPE = 'command = "python -c \\"print(6 * 7)\\" > answer.txt"'


def _task(answer_task: Path, tmp_path: Path, *edits: tuple[str, str]) -> Path:
    return answer_copy(tmp_path / "task", *edits, source=answer_task)


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        (
            [("higher_is_better = true", "higher_is_better = false")],
            "field metric.top: top 1 is not better than baseline 0 with "
            "metric.higher_is_better = false",
        ),
        ([("top = 1.0", "top = 0.0")], "field metric.top: top 0 is not better than baseline 0"),
        (
            [("baseline = 0.5", "baseline = 0.5\ntop = 0.25")],
            "field validation.top: top 0.25 is not better than baseline 0.5",
        ),
        (
            [("top = 1.0", 'top = 1.0\nsuccess_rule = "threshold"')],
            'field metric.success_threshold: success_rule "threshold" needs it',
        ),
        (
            [
                ("baseline = 0.0\n", ""),
                ("top = 1.0", 'top = 1.0\nsuccess_rule = "relative_improvement"'),
            ],
            'field metric.baseline: success_rule "relative_improvement" needs a baseline',
        ),
        (
            [("top = 1.0", "top = 1.0\nsuccess_threshold = 0.9")],
            'field metric.success_threshold: is set, but success_rule is "gap_fraction"',
        ),
        (
            [
                (
                    "top = 1.0",
                    'top = 1.0\nsuccess_rule = "threshold"\nsuccess_threshold = 0.9\nsuccess_fraction = 0.1',
                )
            ],
            'field metric.success_fraction: is set, but success_rule is "threshold"',
        ),
        ([('artifact = "answer.txt"', 'artifact = ""')], "field evaluator.artifact: is empty"),
        (
            [('artifact = "answer.txt"', 'artifact = "/tmp/answer.txt"')],
            "field evaluator.artifact: '/tmp/answer.txt' must be a path inside the workspace",
        ),
        (
            [('submit = "answer.txt"', 'submit = "answer.csv"')],
            "field baseline.submit: 'answer.csv' is not evaluator.artifact 'answer.txt'",
        ),
        (
            [('submit = "answer.txt"', 'submit = "../answer.txt"')],
            "field baseline.submit: '../answer.txt' must be a path inside the workspace",
        ),
        (
            [(f'[[baseline.steps]]\ntitle = "Compute the answer"\n{RECIPE}\ntimeout = "1m"\n', "")],
            "field baseline.steps: the recipe submits an artifact but has no steps",
        ),
        (
            [(RECIPE, 'command = "  "')],
            "field baseline.steps.0.command: step 'Compute the answer' has an empty command",
        ),
        (
            [(RECIPE, 'command = "python -u train.py --out answer.txt"')],
            "field baseline.steps.0.command: runs 'train.py', which is not among the starter "
            "files (starter)",
        ),
        (
            [('hidden = ["hidden"]', 'hidden = ["hidden"]\nread_only = ["eval.py"]')],
            "field files.read_only: 'eval.py' is not a starter file",
        ),
        (
            [('hidden = ["hidden"]', 'hidden = ["hidden"]\nread_only = ["../task.toml"]')],
            "field files.read_only: '../task.toml' must be a path inside the workspace",
        ),
    ],
)
def test_a_task_with_a_mistake_is_refused_in_one_line(
    answer_task: Path, tmp_path: Path, edits: list[tuple[str, str]], message: str
) -> None:
    folder = _task(answer_task, tmp_path, *edits)
    with pytest.raises(TaskError) as info:
        load_task(folder)
    text = str(info.value)
    assert text.startswith(f"{folder / 'task.toml'}: field ")
    assert message in text
    assert "\n" not in text


def test_mlra_tasks_says_the_mistake_in_one_line_with_status_2(
    answer_task: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _task(answer_task, tmp_path, ("top = 1.0", "top = -1.0"))
    assert main(["tasks", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "field metric.top" in err and "Traceback" not in err


def test_a_recipe_whose_scripts_are_there_loads(answer_task: Path, tmp_path: Path) -> None:
    folder = _task(
        answer_task,
        tmp_path,
        (RECIPE, 'command = "cd tools && python3 -W ignore make.py > ../answer.txt"'),
        ('hidden = ["hidden"]', 'hidden = ["hidden"]\nread_only = ["question.txt", "tools"]'),
    )
    (folder / "starter" / "tools").mkdir()
    (folder / "starter" / "tools" / "make.py").write_text("print(42)\n")
    task = load_task(folder)
    assert task.files.read_only == ["question.txt", "tools"]


def test_every_builtin_task_passes_the_checks() -> None:
    for folder in builtin_task_dirs():
        load_task(folder)


@pytest.mark.parametrize(
    ("command", "scripts"),
    [
        ("python train.py --out submission", ["train.py"]),
        ("python3.11 -u -W ignore src/train.py", ["src/train.py"]),
        ("cd src && python train.py; python ../eval.py", ["src/train.py", "eval.py"]),
        ("python -c 'print(1)' > answer.txt", []),
        ("python -m pip list && python -mtorch.utils", []),
        ("python $SCRIPT && python /opt/x.py", []),
        ("accelerate launch train.py", []),
        ("python 'unbalanced", []),
    ],
)
def test_the_scripts_a_recipe_runs_are_read_from_its_command(
    command: str, scripts: list[str]
) -> None:
    assert scripts_run(command) == scripts


def _metric(**fields: object) -> Metric:
    return Metric.model_validate({"name": "acc", **fields})


def test_gap_fraction_is_todays_rule() -> None:
    m = _metric(baseline=0.5, top=0.9)
    assert success_of(m, 0.52) is True and success_of(m, 0.519) is False
    assert success_bar(m) == "gap_fraction: normalized >= 0.05"
    assert success_of(_metric(baseline=0.5), 0.9) is None  # no top: no bar, as before
    assert success_of(m, None) is None


def test_relative_improvement_is_mlagentbenchs_rule_in_either_direction() -> None:
    up = _metric(success_rule="relative_improvement", baseline=0.5)
    assert success_of(up, 0.56) is True
    assert success_of(up, 0.55) is False  # "more than" 10%
    assert success_bar(up) == "relative_improvement: acc > 0.55, 10% over baseline 0.5"
    down = _metric(
        name="loss", higher_is_better=False, success_rule="relative_improvement",
        success_improvement=0.2, baseline=-2.0,
    )  # fmt: skip
    assert success_of(down, -2.5) is True and success_of(down, -2.3) is False
    assert success_bar(down) == "relative_improvement: loss < -2.4, 20% over baseline -2"


def test_threshold_is_an_absolute_bar_in_the_metrics_direction() -> None:
    up = _metric(success_rule="threshold", success_threshold=0.8)
    assert success_of(up, 0.8) is True and success_of(up, 0.79) is False
    down = _metric(higher_is_better=False, success_rule="threshold", success_threshold=3.0)
    assert success_of(down, 3.0) is True and success_of(down, 3.1) is False
    assert success_bar(down) == "threshold: acc <= 3"


def test_the_rule_and_its_bar_are_said_wherever_success_is(
    answer_task: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The log, result.json, the run's last line, `mlra runs` and the batch report say
    which rule decided `success`, and its bar."""
    from mlra import events as ev
    from mlra.agent.record.eventlog import read_events
    from mlra.batch.report_rows import collect, summarize
    from mlra.batch.report_tables import markdown
    from tests.conftest import run_baseline

    folder = _task(
        answer_task,
        tmp_path,
        ("top = 1.0", 'top = 1.0\nsuccess_rule = "threshold"\nsuccess_threshold = 1.0'),
    )
    run = run_baseline(folder, tmp_path, "--isolation", "none")
    bar = "threshold: exact_match >= 1"
    finished = next(
        e for e in read_events(run.run_dir / "events.jsonl") if isinstance(e, ev.EvaluationFinished)
    )
    assert (finished.success, finished.success_rule, finished.success_bar) == (
        True,
        "threshold",
        bar,
    )
    result = json.loads((run.run_dir / "result.json").read_text())
    assert (result["success"], result["success_rule"], result["success_bar"]) == (
        True,
        "threshold",
        bar,
    )
    assert f"success ({bar})" in run.proc.stdout

    assert main(["runs", "--runs-dir", str(tmp_path / "runs")]) == 0
    out, err = capsys.readouterr()
    header, line = out.splitlines()
    assert line.split()[header.split().index("success") - 1] == "yes"  # "best val.": 2 words
    # The bar as the run was judged by it: a measured baseline may have moved since.
    assert f"success by the task's rule, as each run was judged: answer: {bar}" in err

    rows = collect(tmp_path / "runs")
    report = markdown(summarize(rows), rows)
    assert f"- answer: {bar}" in report and "success = by each task's own rule" in report
    assert "Success bars, by each task's rule, as its runs were judged (a measured " in report
