"""A task's code is parsed once a readiness check, whichever reader asks for it: the
imports, the dataset loads, the network clients (tasks/network_reads.py) and the
grader's own imports each parsed every file again, and `mlra tasks show` ran the check
more than once, so on 500 large modules it went from 210 s to 578 s when
network_reads.py was added. Nothing is kept from one check to the next (a file changed
since is read afresh). `ast.parse` is counted by the file it is given."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mlra.console.cli.cli import main as mlra_main
from mlra.tasks import code_reading
from mlra.tasks.foreign.common import CACHE_VAR
from mlra.tasks.readiness import task_needs
from mlra.tasks.spec import load_task
from tests.tasks.folders import write_tree
from tests.tasks.test_folder_needs import EVAL_PY, mab_folder

MODULE = (
    "import os\nimport requests\nfrom datasets import load_dataset\n\n"
    "DATA = load_dataset('imdb_{n}')\n\n"
    "def fetch():\n    return requests.get('https://example.com/{n}.json').json()\n"
)


@pytest.fixture
def parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """`ast.parse`'s calls, by the name of the file parsed."""
    monkeypatch.setenv(CACHE_VAR, str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    counted: Counter[str] = Counter()
    real = ast.parse

    def counting(source: Any, filename: str = "<unknown>", *args: Any, **kwargs: Any) -> Any:
        counted[Path(filename).name] += 1
        return real(source, filename, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting)
    return counted


def many_modules(tmp_path: Path) -> Path:
    """An MLAgentBench folder: five starter modules that import, load a dataset and fetch
    a URL, and a grader whose eval.py imports a helper of its own."""
    files: dict[str, str | None] = {f"env/mod_{n}.py": MODULE.format(n=n) for n in range(5)}
    files["scripts/eval.py"] = "import helper\n" + EVAL_PY
    files["scripts/helper.py"] = "import json\nimport requests\n"
    return mab_folder(tmp_path, files=files)


def code_names(source: Path) -> set[str]:
    return {p.name for p in [*source.glob("env/*.py"), *source.glob("scripts/*.py")]}


def test_a_readiness_check_parses_each_file_once(tmp_path: Path, parses: Counter[str]) -> None:
    source = many_modules(tmp_path)
    task = load_task(source)  # its loader reads eval.py for itself
    parses.clear()
    found = task_needs(task)
    assert [f.what for f in found.starter_fetches][:1] == [
        "requests.get('https://example.com/0.json')"
    ]
    assert set(parses) == code_names(source), parses
    assert set(parses.values()) == {1}, parses


def test_what_a_check_keeps_is_the_graders_files_and_the_last_file_read(
    tmp_path: Path, parses: Counter[str]
) -> None:
    """A tree and its nodes take about 115 times the source: keeping every tree up to
    4 MB of source held some 460 MB, though the readers go file by file and only the
    grader's files (parsed first, to find them) are read again."""
    task = load_task(many_modules(tmp_path))
    with code_reading.one_reading():
        task_needs(task)
        reading = code_reading._reading.get()  # pyright: ignore[reportPrivateUsage]
        assert reading is not None
        kept = [Path(path).name for path in reading.kept()]
    assert kept == ["eval.py", "helper.py", "train.py"], kept
    assert len(reading.nodes) == len(kept)


def test_grader_files_past_what_is_kept_are_parsed_again(
    tmp_path: Path, parses: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grader's trees kept are bounded (by their source, KEPT_SOURCE_BYTES): with no
    room, the readers still find each starter file once, going file by file; the
    grader's files, parsed first to find which they are, are read again then."""
    monkeypatch.setattr(code_reading, "KEPT_SOURCE_BYTES", 1)
    task = load_task(many_modules(tmp_path))
    parses.clear()
    task_needs(task)
    starter = {name: n for name, n in parses.items() if name.startswith(("mod_", "train"))}
    assert starter == {"train.py": 1, **{f"mod_{n}.py": 1 for n in range(5)}}, parses
    assert parses["eval.py"] == parses["helper.py"] == 2, parses


def test_tasks_show_parses_each_starter_file_once(
    tmp_path: Path, parses: Counter[str], capsys: pytest.CaptureFixture[str]
) -> None:
    source = many_modules(tmp_path)
    assert mlra_main(["tasks", "show", str(source)]) == 0
    assert "requests.get('https://example.com/0.json')" in capsys.readouterr().out
    starter = {name: n for name, n in parses.items() if name.startswith("mod_")}
    assert starter == {f"mod_{n}.py": 1 for n in range(5)}, parses


def test_a_file_changed_between_checks_is_read_afresh(tmp_path: Path, parses: Counter[str]) -> None:
    source = many_modules(tmp_path)
    assert not task_needs(load_task(source)).starter_missing
    write_tree(source, {"env/mod_0.py": "import mlra_surely_absent_module\n"})
    missing = task_needs(load_task(source)).starter_missing
    assert [(f.what, f.where) for f in missing] == [("mlra_surely_absent_module", "env/mod_0.py")]


def test_a_readiness_check_walks_each_tree_once(
    tmp_path: Path, parses: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The readers walked each whole tree about eight times, which cost several times
    the parse; they now share one walk of it."""
    task = load_task(many_modules(tmp_path))
    walks: Counter[int] = Counter()
    walked: list[ast.AST] = []  # held, so that no tree's id is reused once it is dropped
    real = ast.walk

    def counting(node: ast.AST) -> Any:
        if isinstance(node, ast.Module):
            walks[id(node)] += 1
            walked.append(node)
        return real(node)

    monkeypatch.setattr(ast, "walk", counting)
    task_needs(task)
    assert len(walks) == len(code_names(task.root)), walks  # a tree a file
    assert set(walks.values()) == {1}, walks
