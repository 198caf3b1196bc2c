"""Runs of two task folders whose tasks share a name (`mlagentbench/answer`, `mlrc/answer`)
made one by one, outside any batch: `mlra runs`, `mlra compare`, a run's shared page and
`mlra export` each call the two tasks as a batch would (the shortest end of each folder's
path, from the folder each run's log recorded), where before they read as one task
`answer`: one group in compare (one starred best across both), one experiment in the
trackers. A run whose task's name is its own shows as before. Real baseline runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mlra.console.cli.cli import main
from tests.batch.test_share_page import check_page_is_ours
from tests.conftest import ANSWER_TASK, answer_task_as, run_baseline

LABELS = ("mlagentbench/answer", "mlrc/answer")
APART = "2 tasks are named answer, told apart by their folders: mlagentbench/answer, mlrc/answer"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One baseline run of each task, in one runs folder, by label."""
    root = tmp_path_factory.mktemp("same-named")
    made = {}
    for label in LABELS:
        bench = root / label.split("/")[0]
        bench.mkdir()
        task = answer_task_as(ANSWER_TASK, bench, "answer")
        made[label] = run_baseline(task, root, "--isolation", "none").run_dir
    return made


def _out(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_runs_lists_each_task_by_the_end_of_its_folder(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = str(runs[LABELS[0]].parent)
    listed = [
        json.loads(line)
        for line in _out(capsys, "runs", "--runs-dir", folder, "--json").splitlines()
    ]
    assert {r["id"]: r["task"] for r in listed} == {runs[k].name: k for k in LABELS}
    table = _out(capsys, "runs", "--runs-dir", folder, "--task", "mlrc/")
    assert "mlrc/answer" in table and runs["mlrc/answer"].name in table
    assert runs["mlagentbench/answer"].name not in table, table
    # Alone in its folder, a run's task is its name, as it always was.
    alone = tmp_path / "alone"
    shutil.copytree(runs["mlrc/answer"], alone / runs["mlrc/answer"].name)
    (row,) = [
        json.loads(line)
        for line in _out(capsys, "runs", "--runs-dir", str(alone), "--json").splitlines()
    ]
    assert row["task"] == "answer"


def test_compare_never_groups_the_two_tasks_and_says_it_told_them_apart(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = (str(runs[k]) for k in LABELS)
    text = _out(capsys, "compare", a, b, "--no-tui")
    task_row = next(line for line in text.splitlines() if line.startswith("task "))
    assert task_row.split() == ["task", *LABELS], text
    # Each run is the best of its own task's runs: two stars, not one ranking.
    assert "best exact_match ↑ of each task's runs" in text, text
    assert APART in text, text
    data = json.loads(_out(capsys, "compare", a, b, "--json"))
    assert data["tasks_apart"] == APART
    assert data["best_of"] == "of each task's runs" and len(data["best"]) == 2
    # Two runs of one task compared (its copy elsewhere): one task `answer`, as before.
    copy = shutil.copytree(a, tmp_path / "elsewhere" / "copy")
    one = json.loads(_out(capsys, "compare", a, str(copy), "--json"))
    assert "tasks_apart" not in one and one["best_of"] == "all the runs"
    assert next(r["cells"] for r in one["rows"] if r["name"] == "task") == ["answer", "answer"]


def test_a_runs_shared_page_names_its_task_as_the_runs_list_does(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "run.html"
    _out(capsys, "share", str(runs["mlrc/answer"]), "-o", str(page))
    shown = check_page_is_ours(page.read_text(encoding="utf-8"))
    assert "mlrc/answer · baseline · mlra share" in "".join(shown.text)
    assert "<h1>mlrc/answer" in page.read_text(encoding="utf-8")
    data = json.loads(next(s[1] for s in shown.scripts if s[0].get("type")))
    assert (data["task"], data["task_label"]) == ("answer", "mlrc/answer")


def test_export_gives_each_task_its_own_experiment_whether_exported_together_or_one_by_one(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlflow.tracking import MlflowClient

    folder = str(runs[LABELS[0]].parent)
    tb = tmp_path / "tb"
    said = _out(capsys, "export", folder, "--to", "tensorboard", "--dest", str(tb))
    assert {p.name for p in tb.iterdir()} == {"mlagentbench_answer", "mlrc_answer"}, said
    assert (tb / "mlrc_answer" / runs["mlrc/answer"].name).is_dir()
    # One by one, each run joins the experiment it would share exported with the other.
    mlruns = tmp_path / "mlruns"
    for label in LABELS:
        said = _out(capsys, "export", str(runs[label]), "--to", "mlflow", "--dest", str(mlruns))
        assert f"experiment 'mlra/{label}', 1 run " in said, said
    client = MlflowClient(tracking_uri=mlruns.resolve().as_uri())
    for label in LABELS:
        experiment = client.get_experiment_by_name(f"mlra/{label}")
        assert experiment is not None, label
        (run,) = client.search_runs([experiment.experiment_id])
        assert run.info.run_name == runs[label].name
        assert (run.data.params["task"], run.data.params["task_label"]) == ("answer", label)
    assert client.get_experiment_by_name("mlra/answer") is None


def test_a_report_of_a_plain_runs_folder_has_a_row_a_task(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mlra report ./runs` and `mlra share ./runs` (no batch, so no batch's names):
    a group each, as `mlra runs` lists them."""
    folder = shutil.copytree(runs[LABELS[0]].parent, tmp_path / "runs")
    text = _out(capsys, "report", str(folder))
    assert "| mlagentbench/answer | baseline | 1 |" in text, text
    assert "| mlrc/answer | baseline | 1 |" in text, text
    page = tmp_path / "runs.html"
    _out(capsys, "share", str(folder), "-o", str(page))
    shown = page.read_text(encoding="utf-8")
    assert all(f"<td>{label}</td>" in shown for label in LABELS), shown
