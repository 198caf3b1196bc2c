"""The README's `mlra run` examples, each made once per test session, in one fresh folder,
as a newcomer copies them (the slow suite).

Each is a training and a grading of tiny-lm, minutes apiece: the README test runs its
other examples on these runs, and the tests of what a tiny-lm run, a search over its
recipe and a demo run give read them too, rather than each making a run of its own.
A test that reads one must not change it: one that does (annotate, eval) works on a
copy (`copy_runs`).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.conftest import mlra_cli, offline_env

README = Path(__file__).resolve().parent.parent / "README.md"
NEEDS = re.compile(r"(?:^|\(|;\s)needs\b")
"""A comment that says what the example needs (`# needs X`, `(needs X)`): the example
is parsed, not run."""
BASELINE = "mlra run tiny-lm --model baseline --no-tui"
SEARCH = "mlra run tiny-lm --model baseline --search greedy"
DEMO = "mlra run tiny-lm --model demo"


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


def runnable_commands() -> list[str]:
    """The examples that do not say what they need: each runs as written."""
    return [c for c, comment in readme_commands() if not NEEDS.search(comment)]


def argv_of(command: str, run_id: str = "r1") -> list[str]:
    words = shlex.split(command.replace("<run-id>", run_id))
    if words and words[-1] == "&":
        words.pop()
    assert words[0] == "mlra"
    return words[1:]


class ReadmeRun(NamedTuple):
    command: str
    """The README's line, as written."""
    proc: subprocess.CompletedProcess[str]
    run_dir: Path


@pytest.fixture(scope="session")
def readme_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The newcomer's fresh folder: the runs land in its `runs/`, the README's default."""
    return tmp_path_factory.mktemp("readme")


def _make(folder: Path, start: str) -> ReadmeRun:
    """The one runnable README example that starts with `start`, run as written from
    `folder`: it must succeed and make one run folder."""
    (command,) = [c for c in runnable_commands() if c.startswith(start)] or [
        pytest.fail(f"README.md has no runnable example starting `{start}`")
    ]
    runs = folder / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    proc = mlra_cli(argv_of(command), cwd=folder, env=offline_env(), timeout=1800)
    assert proc.returncode == 0, f"`{command}`:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    (run_dir,) = set(runs.iterdir()) - before
    return ReadmeRun(command, proc, run_dir)


@pytest.fixture(scope="session")
def readme_baseline_run(readme_folder: Path) -> ReadmeRun:
    """`mlra run tiny-lm --model baseline --no-tui`: the recipe, trained and graded."""
    return _make(readme_folder, BASELINE)


@pytest.fixture(scope="session")
def readme_search_run(readme_folder: Path, readme_baseline_run: ReadmeRun) -> ReadmeRun:
    """`mlra run tiny-lm --model baseline --search greedy --attempts 3`: three attempts of
    the recipe's variants, each validated, the best graded. (After the baseline run, as
    the README orders them.)"""
    return _make(readme_folder, SEARCH)


@pytest.fixture(scope="session")
def readme_demo_run(readme_folder: Path, readme_search_run: ReadmeRun) -> ReadmeRun:
    """`mlra run tiny-lm --model demo`, where no terminal is: the scripted agent, headless."""
    return _make(readme_folder, DEMO)


def copy_runs(runs: list[ReadmeRun], folder: Path) -> None:
    """The runs copied into `folder/runs`, for a test that changes them (a run folder
    moved elsewhere must serve as well as where it was made)."""
    for run in runs:
        shutil.copytree(run.run_dir, folder / "runs" / run.run_dir.name, symlinks=True)
