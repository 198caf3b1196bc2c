"""A batch folder holds one batch: `mlra batch --out X` that leaves out tasks, models or
seeds X was made for is refused in one line, exit 2 (a newcomer's `--models baseline
--seeds 3` on a folder of two models' runs said `batch: 3/3 finished` over a report.md
of 5 runs, the earlier ones mixed in unsaid). The real CLI, a real baseline run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlra.batch.spec import BatchError, keep_spec, load_tasks, parse_spec
from mlra.tasks.spec import BUILTIN_TASKS_DIR
from tests.conftest import answer_copy, mlra_cli


def test_another_spec_in_the_same_out_is_refused_naming_the_difference(
    tmp_path: Path, answer_task: Path
) -> None:
    (tmp_path / "answer_task").symlink_to(answer_task)
    out = tmp_path / "b"
    first = ["batch", "--tasks", "answer_task", "--models", "baseline", "--out", str(out)]
    first += ["--isolation", "none", "--no-tui"]
    proc = mlra_cli(first, cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    first_two = [*first, "--seeds", "2"]  # grown by a seed: carried on
    grown = mlra_cli(first_two, cwd=tmp_path, timeout=180)
    assert grown.returncode == 0, grown.stdout + grown.stderr
    made = (out / "batch.json").read_text()

    other = [*first, "--seeds", "1"]
    refused = mlra_cli(other, cwd=tmp_path, timeout=60)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    said = refused.stderr.strip()
    assert len(said.splitlines()) == 1, said
    assert f"{out} holds runs this batch leaves out (seeds 2 -> 1)" in said, said
    assert "another --out" in said
    assert (out / "batch.json").read_text() == made  # the folder's spec is kept

    # The same spec carries it on (its runs already finished).
    again = mlra_cli(first_two, cwd=tmp_path, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2/2 finished (2 already were" in again.stdout
    assert json.loads((out / "batch.json").read_text())["seeds"] == 2


def _task_named(name: str, folder: Path, answer_task: Path) -> Path:
    """A copy of the answer task under another name (a task of its own: its runs are
    keyed by that name)."""
    return answer_copy(folder, ('name = "answer"', f'name = "{name}"'), source=answer_task)


def test_the_same_tasks_named_otherwise_carry_the_folder_on_and_other_tasks_under_the_same_words_do_not(
    tmp_path: Path, answer_task: Path
) -> None:
    """The folder's tasks compare as they resolve, not as typed: another order, a trailing
    slash or another path to the same folder carries the batch on; the same words naming
    another task from another directory are refused (they were taken as the same)."""
    (tmp_path / "answer").symlink_to(answer_task)
    _task_named("second", tmp_path / "second", answer_task)
    out = tmp_path / "b"
    common = ["--models", "baseline", "--isolation", "none", "--no-tui"]
    first = mlra_cli(
        ["batch", "--tasks", "answer,second", "--out", str(out), *common], cwd=tmp_path, timeout=240
    )
    assert first.returncode == 0, first.stdout + first.stderr

    spelled = f"second/,{tmp_path / 'answer'}/"
    again = mlra_cli(["batch", "--tasks", spelled, "--out", str(out), *common], cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2/2 finished (2 already were" in again.stdout
    made = (out / "batch.json").read_text()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _task_named("third", elsewhere / "answer", answer_task)  # `answer` here is another task
    (elsewhere / "second").symlink_to(tmp_path / "second")
    refused = mlra_cli(
        ["batch", "--tasks", "answer,second", "--out", str(out), *common], cwd=elsewhere, timeout=60
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    said = refused.stderr.strip()
    assert len(said.splitlines()) == 1, said
    assert f"{out} holds runs this batch leaves out (tasks second,answer -> third,second)" in said
    assert (out / "batch.json").read_text() == made
    assert not list((out / "runs").glob("third__*"))  # nothing of the other task started


def test_a_builtin_task_by_name_is_the_task_of_its_folder(
    tmp_path: Path, answer_task: Path
) -> None:
    """`--tasks tiny-lm` and `--tasks <its folder>/` are one task to the folder, and so are
    the typed tasks a folder from an earlier mlra kept (no resolved names in batch.json)."""
    out = tmp_path / "b"
    out.mkdir()

    def keep(*tasks: str) -> None:
        spec = parse_spec({"tasks": list(tasks), "models": ["baseline"]})
        keep_spec(out, spec, load_tasks(spec))

    keep("tiny-lm")
    keep(f"{BUILTIN_TASKS_DIR / 'tiny-lm'}/")
    assert json.loads((out / "batch.json").read_text())["task_names"] == ["tiny-lm"]
    with pytest.raises(BatchError, match=r"leaves out \(tasks tiny-lm -> answer\)"):
        keep(str(answer_task))

    earlier = json.loads((out / "batch.json").read_text())
    del earlier["task_names"]
    earlier["tasks"] = [f"{answer_task}/"]  # as typed then; it still loads from here
    (out / "batch.json").write_text(json.dumps(earlier))
    keep(str(answer_task), "tiny-lm")  # grows it by a task
    with pytest.raises(BatchError, match=r"leaves out \(tasks answer,tiny-lm -> tiny-lm\)"):
        keep("tiny-lm")
