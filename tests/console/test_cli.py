"""The command line: bad input gets one clear line and exit status 2, and nothing
is left behind; `--help` stays light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import answer_copy, mlra_cli


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["run", "no-such-task", "--model", "baseline"], {}, "unknown task 'no-such-task'"),
        (["run", "{answer}", "--model", "foo/bar"], {}, "unknown model 'foo/bar'"),
        (["run", "{answer}", "--model", "anthropic/claude-x"], {}, "ANTHROPIC_API_KEY"),
        (["run", "{answer}", "--model", "openai/gpt-x"], {}, "OPENAI_API_KEY"),
        (["run", "{answer}"], {}, "baseline"),
        (
            ["run", "{answer}", "--model", "baseline", "--max-steps", "abc"],
            {},
            "'abc' is not a whole number",
        ),
        (
            ["run", "{answer}", "--model", "baseline", "--time-limit", "soon"],
            {},
            "'soon' is not a duration",
        ),
        (["run", "{answer}", "--model", "baseline", "--max-cost", "-1"], {}, "must be positive"),
        (
            ["run", "{answer}", "--model", "baseline", "--frobnicate"],
            {},
            "unrecognized arguments: --frobnicate",
        ),
        (["run", "{broken}", "--model", "baseline"], {}, "field metric.top"),
        (["tasks", "show"], {}, "name a task"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, answer_task: Path, args: list[str], env: dict[str, str], expected: str
) -> None:
    broken = answer_copy(tmp_path / "broken", ("top = 1.0", 'top = "best"'), source=answer_task)
    args = [a.format(answer=answer_task, broken=broken) for a in args]
    proc = mlra_cli(
        [*args, "--runs-dir", str(tmp_path / "runs")] if args[0] == "run" else args,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert expected in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_model_default_order(tmp_path: Path, answer_task: Path) -> None:
    # MLRA_MODEL wins over the keys; here it names the baseline agent, which needs no server.
    proc = mlra_cli(
        ["run", str(answer_task), "--no-tui", "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path,
        env={"MLRA_MODEL": "baseline", "ANTHROPIC_API_KEY": "sk-unused"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "answer · baseline" in proc.stdout


def test_help_does_not_import_heavy_packages() -> None:
    code = (
        "import sys\n"
        "from mlra.console.cli.cli import main\n"
        "for argv in (['--help'], ['run', '--help'], ['tasks', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = ('torch', 'transformers', 'lm_eval', 'anthropic', 'openai', 'textual', 'pydantic')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_tasks_lists_the_builtin_tasks(tmp_path: Path) -> None:
    proc = mlra_cli(["tasks"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "tiny-lm" in proc.stdout and "CPU only" in proc.stdout


def test_tasks_wrap_under_their_text_on_a_narrow_terminal(tmp_path: Path) -> None:
    """A terminal of 60 columns: each row wraps at words, its further lines indented
    under the text (a terminal's own wrap put them at column 0, under the names); a
    pipe keeps each row on one line, for grep."""
    from mlra.tasks.spec import builtin_task_dirs
    from tests.console.test_runs_by_priority import _on_a_terminal

    names = {folder.name for folder in builtin_task_dirs()}
    screen = _on_a_terminal(["tasks"], 60)
    lines = screen.splitlines()
    assert all(len(line) <= 60 for line in lines), screen
    starts = [line.split()[0] for line in lines if not line.startswith(" " * 25)]
    assert set(starts) == names, screen
    assert len(lines) > 2 * len(names)  # some rows did wrap
    piped = mlra_cli(["tasks"], cwd=tmp_path, env={"COLUMNS": "60"})
    assert len(piped.stdout.splitlines()) == 2 * len(names), piped.stdout


def test_a_tasks_facts_wrap_under_their_labels_on_a_narrow_terminal() -> None:
    """`mlra tasks babylm` at 80 columns: each fact after the prompt wraps under its
    label's text ("needs:      ...", "      why: ...", a rule's bullet), never at column 0;
    the prompt is the agent's text, shown as it is."""
    from tests.console.test_runs_by_priority import _on_a_terminal

    screen = _on_a_terminal(["tasks", "babylm"], 80)
    facts = screen[screen.index("\nmetric:     ") + 1 :].splitlines()
    assert all(len(line) <= 80 for line in facts), screen
    needs = next(i for i, line in enumerate(facts) if line.startswith("needs:      "))
    assert facts[needs + 1].startswith(" " * 12) and facts[needs + 1][12] != " ", facts
    bullet = next(i for i, line in enumerate(facts) if line.startswith("  · trusted"))
    assert facts[bullet + 1].startswith("    ") and facts[bullet + 1][4] != " "


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    """`mlra tasks show tiny-lm | head -1`: the pipe closes under the printer."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "mlra", "tasks", "show", "tiny-lm"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the child writes anything: its first write fails
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert "Traceback" not in err and "BrokenPipeError" not in err


@pytest.mark.parametrize(
    ("args", "help_of"),
    [
        (["compare", "a", "b", "--curves"], "mlra compare"),
        (["run", "x", "--time-limit", "banana"], "mlra run"),
        (["share", "r", "--frobnicate"], "mlra share"),
        (["ctl", "r", "status", "--frobnicate"], "mlra ctl"),
        (["--frobnicate"], "mlra"),
        (["image", "build", "--frobnicate"], "mlra image"),
    ],
)
def test_a_usage_error_points_to_its_own_commands_help(
    tmp_path: Path, args: list[str], help_of: str
) -> None:
    """`mlra compare A B --curves` pointed to `mlra --help`, where the flags of compare
    are not listed, while `mlra run --time-limit banana` pointed to `mlra run --help`."""
    proc = mlra_cli(args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.endswith(f"(see `{help_of} --help`)"), line
