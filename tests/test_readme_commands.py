"""Every `mlra ...` example in README.md is a command the real argument parser takes,
and each that does not say what it needs (a key, a live run, Docker...) runs as
written, without a key, one after the other in a fresh folder (the slow suite): a
newcomer who copies them meets no error."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from mlra.console.cli.cli import build_parser
from tests.conftest import mlra_cli, offline_env

README = Path(__file__).resolve().parent.parent / "README.md"
NEEDS = re.compile(r"(?:^|\(|;\s)needs\b")
"""A comment that says what the example needs (`# needs X`, `(needs X)`): the example
is parsed, not run."""


def readme_commands() -> list[tuple[str, str]]:
    """Each `mlra ...` command in the README's shell blocks, with its line's comment."""
    commands: list[tuple[str, str]] = []
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    for line in "\n".join(blocks).splitlines():
        code, _, comment = line.partition(" # ")
        for part in code.split("&&"):
            part = part.strip()
            if part.startswith("mlra "):
                commands.append((part, comment))
    return commands


def argv_of(command: str, run_id: str = "r1") -> list[str]:
    words = shlex.split(command.replace("<run-id>", run_id))
    if words and words[-1] == "&":
        words.pop()
    assert words[0] == "mlra"
    return words[1:]


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
def test_the_readme_examples_that_need_nothing_run_as_written(tmp_path: Path) -> None:
    runnable = [c for c, comment in readme_commands() if not NEEDS.search(comment)]
    env = offline_env()
    run_id = ""
    for command in runnable:
        argv = argv_of(command, run_id or "r1")
        proc = mlra_cli(argv, cwd=tmp_path, env=env, timeout=900)
        assert proc.returncode == 0, f"`{command}`:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        if not run_id and argv[0] == "run":
            (folder,) = (tmp_path / "runs").iterdir()  # the run the later examples name
            run_id = folder.name
    assert run_id, "no example made a run for the others to read"
