"""Task files: clear refusals naming the file and field; prompts in the benchmark's sections."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlra.tasks.spec import TaskError, builtin_task_dirs, find_task, load_task
from tests.conftest import answer_copy, mlra_cli


def test_the_test_task_loads_and_renders(answer_task: Path) -> None:
    task = load_task(answer_task)
    prompt = task.render_prompt(time_limit_s=90)
    assert prompt.startswith("# Write the answer")
    assert "## Time limit\nYou have 1m30s" in prompt
    assert "## Evaluation\nExact match" in prompt
    assert task.time_limit_s == 300


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("top = 1.0", 'top = "high"', "field metric.top: Input should be a valid number"),
        (
            '[metric]\nname = "exact_match"\n',
            "[metric]\n",
            "field metric.name: is required but missing",
        ),
        ('kind = "script"', 'kind = "magic"', "field evaluator.kind"),
        ('time_limit = "5m"', 'time_limit = "soon"', "field resources.time_limit"),
        (
            "network = false",
            "network = false\ngpu = 3",
            "field resources.gpu: is not a known field",
        ),
        (
            'starter = ["starter"]',
            'starter = ["nothere"]',
            "field files.starter: 'nothere' does not exist",
        ),
        (
            'hidden = ["hidden"]',
            'hidden = ["../../x"]',
            "field files.hidden: '../../x' is outside the task folder",
        ),
        ('title = "Write the answer"', 'title = "unterminated', "not valid TOML"),
        # Time-outs and resources are checked when the file loads, not when first used:
        # an evaluator's time-out nobody could read was a traceback after the run's work.
        (
            'timeout = "1m"\nsettings',
            'timeout = "1 minute"\nsettings',
            "field evaluator.timeout: '1 minute' is not a duration",
        ),
        (
            '> answer.txt"\ntimeout = "1m"',
            '> answer.txt"\ntimeout = "later"',
            "field baseline.steps.0.timeout: 'later' is not a duration",
        ),
        (
            "network = false",
            "network = false\ngpus = -1",
            "field resources.gpus: Input should be greater than or equal to 0",
        ),
        (
            "network = false",
            "network = false\ncpus = 0",
            "field resources.cpus: Input should be greater than 0",
        ),
        # Values that judged every run alike: a success below the baseline, a range no
        # score falls in, a limit or a dtype no model can meet.
        (
            "top = 1.0",
            "top = 1.0\nsuccess_fraction = -1",
            "field metric.success_fraction: Input should be greater than or equal to 0",
        ),
        (
            "top = 1.0",
            "top = 1.0\nscore_range = [1, 0]",
            "field metric: score_range [1, 0] must list the lowest score first",
        ),
        (
            "[baseline]",
            "[constraints]\nmax_parameters = -5\n\n[baseline]",
            "field constraints.max_parameters: Input should be greater than 0",
        ),
        (
            "[baseline]",
            '[constraints]\nallowed_dtypes = ["FP16"]\n\n[baseline]',
            "field constraints.allowed_dtypes: 'FP16' is not a safetensors dtype",
        ),
    ],
)
def test_a_bad_task_file_is_refused_naming_file_and_field(
    answer_task: Path, tmp_path: Path, old: str, new: str, message: str
) -> None:
    folder = answer_copy(tmp_path / "task", (old, new), source=answer_task)
    with pytest.raises(TaskError) as info:
        load_task(folder)
    text = str(info.value)
    assert str(folder / "task.toml") in text
    assert message in text
    assert "\n" not in text


def test_mlra_run_refuses_an_unreadable_evaluator_timeout_before_the_run(
    answer_task: Path, tmp_path: Path
) -> None:
    folder = answer_copy(
        tmp_path / "task",
        ('timeout = "1m"\nsettings', 'timeout = "5x"\nsettings'),
        source=answer_task,
    )
    done = mlra_cli(
        [
            "run",
            str(folder),
            "--model",
            "baseline",
            "--no-tui",
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"mlra: {folder / 'task.toml'}: field evaluator.timeout: '5x' is not a "
        "duration (use forms like 90s, 20m, 1h30m, 24h)"
    ]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_every_problem_of_a_task_file_is_named_through_mlra_run(tmp_path: Path) -> None:
    """A task file missing four fields names all four, one a line under the file, so
    its writer fixes them in one try (not "(and 3 more problems)" left unnamed)."""
    folder = tmp_path / "badtask"
    folder.mkdir()
    (folder / "task.toml").write_text('name = "x"\n')
    done = mlra_cli(["run", str(folder), "--model", "baseline", "--no-tui"], cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"mlra: {folder / 'task.toml'}: 4 problems:",
        "  field title: is required but missing",
        "  field prompt: is required but missing",
        "  field metric: is required but missing",
        "  field evaluator: is required but missing",
    ]


def test_two_bad_values_are_both_named_in_words(answer_task: Path, tmp_path: Path) -> None:
    """Not "Value error, 'soon' is not a duration": pydantic's class of error is left out."""
    folder = answer_copy(
        tmp_path / "task",
        ('timeout = "1m"\nsettings', 'timeout = "soon"\nsettings'),
        ('> answer.txt"\ntimeout = "1m"', '> answer.txt"\ntimeout = "later"'),
        source=answer_task,
    )
    with pytest.raises(TaskError) as info:
        load_task(folder)
    lines = str(info.value).splitlines()
    assert lines[0] == f"{folder / 'task.toml'}: 2 problems:"
    assert any(line.startswith("  field evaluator.timeout: 'soon' is not a") for line in lines)
    assert any("'later' is not a duration" in line for line in lines[1:])
    assert "Value error" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "text", "why"),
    [
        ("x.toml", "garbage [[[\n", "not valid TOML (Expected '=' after a key"),
        ("x.toml", 'title = "fine TOML"\n', "not named task.toml"),
        ("notes.txt", "anything\n", "not a task file"),
    ],
)
def test_a_file_not_named_task_toml_is_named_as_given(
    tmp_path: Path, name: str, text: str, why: str
) -> None:
    """`mlra run /tmp/x.toml` names /tmp/x.toml and what is wrong with it, never the
    /tmp/task.toml it was once read as (a path the user never typed)."""
    given = tmp_path / name
    given.write_text(text)
    done = mlra_cli(["run", str(given), "--model", "baseline", "--no-tui"], cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"mlra: {given}: {why}"), line
    assert line.endswith(
        "; a task file must be named task.toml, in its task folder: give that folder"
    )
    assert "task.toml:" not in line


def test_unknown_task_names_the_known_ones() -> None:
    with pytest.raises(TaskError, match="unknown task 'no-such-task'; known tasks: "):
        find_task("no-such-task")


def test_every_builtin_task_loads() -> None:
    for folder in builtin_task_dirs():
        assert load_task(folder).name == folder.name
