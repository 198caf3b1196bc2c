"""Two task folders whose tasks share a name (`mlagentbench/cifar10`, `mlrc/cifar10`) are
two tasks of a batch: before, the batch refused them ("two tasks named"), and its run ids,
report rows and `--out` comparisons all went by the name alone. Each is called by the
shortest end of its folder's path that tells it apart; a batch without such a clash
names its runs as before. The real CLI, real baseline runs."""

from __future__ import annotations

import json
from pathlib import Path

from mlra.batch.compare.runs import expand as compared_folders
from mlra.batch.compare.runs import load_all
from mlra.batch.spec import load_tasks, parse_spec
from mlra.batch.task_labels import run_task_labels, task_labels
from mlra.console.cli.cli import main
from tests.batch.naming import batch_run_id
from tests.conftest import answer_task_as, mlra_cli


def test_labels_are_the_name_unless_shared_then_the_shortest_distinguishing_path_end() -> None:
    root = Path("/data")
    assert task_labels([("a", root / "x" / "a"), ("b", root / "y" / "b")]) == ["a", "b"]
    labels = task_labels(
        [
            ("cifar10", root / "mlagentbench" / "cifar10"),
            ("cifar10", root / "mlrc" / "cifar10"),
            ("tiny", root / "t" / "tiny"),
        ]
    )
    assert labels == ["mlagentbench/cifar10", "mlrc/cifar10", "tiny"]
    # Only as much of each path as it takes: two under `a/` go one level further.
    deep = [root / "p" / "a" / "x", root / "q" / "a" / "x", root / "b" / "x"]
    assert task_labels([("x", d) for d in deep]) == ["p/a/x", "q/a/x", "b/x"]
    # Folders named otherwise are told apart by their own names, but never by another
    # task's name.
    assert task_labels([("x", root / "x"), ("x", root / "y"), ("y", root / "z" / "y")]) == [
        "x",
        "data/y",
        "y",
    ]


def test_runs_are_told_apart_by_the_folder_they_recorded_a_built_in_task_by_its_name() -> None:
    """What `mlra runs`, `compare`, `share` and `export` label runs by (their logs'
    `task_dir`): a built-in task's folder moves with the install (a new venv, another
    Python), and its runs from before stay one task with the runs after."""
    old = "/v1/lib/python3.11/site-packages/mlra/tasks/builtin/answer"
    new = "/v2/lib/python3.12/site-packages/mlra/tasks/builtin/answer"
    assert run_task_labels([("answer", old), ("answer", new)]) == ["answer", "answer"]
    mine = "/home/u/mlrc/answer"
    assert run_task_labels([("answer", old), ("answer", mine), ("answer", new), ("x", "")]) == [
        "builtin/answer",
        "mlrc/answer",
        "builtin/answer",
        "x",
    ]


def test_one_folder_given_twice_is_one_task(tmp_path: Path, answer_task: Path) -> None:
    task = answer_task_as(answer_task, tmp_path, "copy")
    spec = parse_spec({"tasks": [str(task), f"{task}/", str(task)], "models": ["baseline"]})
    assert [(t.name, t.label) for t in load_tasks(spec)] == [("copy", "copy")]


def test_two_tasks_of_one_name_are_two_rows_of_runs_and_resume_as_two(
    tmp_path: Path, answer_task: Path
) -> None:
    for bench in ("mlagentbench", "mlrc"):
        (tmp_path / bench).mkdir()
        answer_task_as(answer_task, tmp_path / bench, "answer")
    out = tmp_path / "b"
    args = ["batch", "--tasks", "mlagentbench/answer,mlrc/answer", "--models", "baseline"]
    args += ["--out", str(out), "--isolation", "none", "--no-tui"]
    first = mlra_cli(args, cwd=tmp_path, timeout=240)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "2/2 finished" in first.stdout, first.stdout

    grown = mlra_cli([*args, "--seeds", "2"], cwd=tmp_path, timeout=240)
    assert grown.returncode == 0, grown.stdout + grown.stderr
    # Both tasks' first seeds were found again; only the second seeds ran.
    assert "4/4 finished (2 already were" in grown.stdout, grown.stdout

    labels = ("mlagentbench/answer", "mlrc/answer")
    ids = {batch_run_id(out, "baseline", seed, label) for label in labels for seed in (1, 2)}
    assert {p.name for p in (out / "runs").iterdir()} == ids
    assert all(i.startswith(("mlagentbench-answer__", "mlrc-answer__")) for i in ids), ids

    report = json.loads((out / "report.json").read_text())
    rows = {(g["task"], g["model"]): g["runs"] for g in report["groups"]}
    assert rows == {(label, "baseline"): 2 for label in labels}
    text = (out / "report.md").read_text()
    assert "| mlagentbench/answer | baseline | 2 |" in text, text
    assert "| mlrc/answer | baseline | 2 |" in text, text
    assert "### mlagentbench/answer" in text and "### mlrc/answer" in text  # runs compared
    # `mlra compare` on the batch folder tells them apart as the report does.
    runs = load_all(compared_folders([out]))
    assert sorted(r.task for r in runs) == sorted([*labels, *labels])
    assert json.loads((out / "batch.json").read_text())["task_names"] == list(labels)
    page = tmp_path / "batch.html"
    assert main(["share", str(out), "-o", str(page)]) == 0
    shown = page.read_text(encoding="utf-8")
    assert "2 task and model groups" in shown
    assert all(f"<td>{label}</td>" in shown for label in labels), shown

    # The same folders typed otherwise carry it on; leaving one out is refused.
    spelled = f"mlrc/answer/,{tmp_path}/mlagentbench/answer"
    again = mlra_cli(["batch", "--tasks", spelled, *args[3:], "--seeds", "2"], cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "4/4 finished (4 already were" in again.stdout, again.stdout
    one = mlra_cli(
        ["batch", "--tasks", "mlrc/answer", *args[3:], "--seeds", "2"], cwd=tmp_path, timeout=60
    )
    assert one.returncode == 2, one.stdout + one.stderr
    assert "(tasks mlrc/answer,mlagentbench/answer -> answer)" in one.stderr, one.stderr
