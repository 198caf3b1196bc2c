"""Every `mlra ...` example in README.md is a command the real argument parser takes,
and each that does not say what it needs (a key, a live run, Docker...) runs as
written, without a key, one after the other in a fresh folder (the slow suite): a
newcomer who copies them meets no error."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlra.console.cli.cli import build_parser
from tests.conftest import mlra_cli, offline_env
from tests.readme_runs import ReadmeRun, argv_of, copy_runs, readme_commands, runnable_commands


def test_the_readme_has_examples() -> None:
    commands = [c for c, _ in readme_commands()]
    assert len(commands) >= 20
    assert any(c.startswith("mlra run tiny-lm --model baseline --no-tui") for c in commands)
    assert any(" -v" in c for c in commands)  # the verbose flag is named


@pytest.mark.parametrize("command", [c for c, _ in readme_commands()])
def test_every_readme_example_parses(command: str) -> None:
    parser = build_parser()
    try:
        args = parser.parse_args(argv_of(command))
    except SystemExit as exc:
        pytest.fail(f"`{command}` is refused by the parser (exit {exc.code})")
    assert args.command is not None


@pytest.mark.slow
def test_the_readme_examples_that_need_nothing_run_as_written(
    tmp_path: Path,
    readme_baseline_run: ReadmeRun,
    readme_search_run: ReadmeRun,
    readme_demo_run: ReadmeRun,
) -> None:
    """The README's runs are made once for the session (tests/readme_runs.py, in the
    README's order, in a fresh folder); the examples after them run here, in order, on
    copies of those runs, `<run-id>` being the first run made."""
    made = [readme_baseline_run, readme_search_run, readme_demo_run]
    runnable = runnable_commands()
    runs_in_order = [c for c in runnable if argv_of(c)[0] == "run"]
    assert runs_in_order == [r.command for r in made], "a README run no session fixture makes"
    copy_runs(made, tmp_path)
    run_id = readme_baseline_run.run_dir.name
    env = offline_env()
    for command in runnable:
        if command in runs_in_order:
            continue
        proc = mlra_cli(argv_of(command, run_id), cwd=tmp_path, env=env, timeout=900)
        assert proc.returncode == 0, f"`{command}`:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
