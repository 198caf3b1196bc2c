"""Benchmark folders as they really are (issue 26): a baseline is a measurement that
succeeded; the direction and success rule are known (by the evaluator's content) or
asked for, never guessed from a folder's name; self-reported scores are marked
everywhere; MLRC-Bench's published numbers and strict rule; seeds reach the recipes.

Every folder here is written for the test, in MLAgentBench's layout (no benchmark
files are copied); the one recognized evaluator is registered by its fingerprint,
as the real ones are in tasks/foreign/known.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.console.cli.cli import main as mlra_main
from mlra.console.text.event_lines import score_line
from mlra.tasks.foreign import known
from mlra.tasks.foreign.common import BASELINE_FILE, CACHE_VAR
from mlra.tasks.foreign.mlrcbench import PUBLISHED, published_name
from mlra.tasks.sections import Metric
from mlra.tasks.spec import load_task
from mlra.tasks.success import success_bar, success_of
from tests.tasks.folders import write_tree

READ_SUBMISSION = (
    "import os\n\n"
    'def get_score(submission_folder="../env"):\n'
    "    try:\n"
    '        with open(os.path.join(submission_folder, "submission.csv")) as f:\n'
    "            return float(f.read().split()[0])\n"
    "    except Exception:\n"
    "        return 1e10\n"
)
"""An evaluator that reads the number the workspace wrote, and returns 1e10 when it
cannot (as MLAgentBench's vectorization does)."""


def folder(parent: Path, name: str, train: str, eval_py: str = READ_SUBMISSION) -> Path:
    files = {
        "env/train.py": train,
        "scripts/research_problem.txt": "Make the number train.py writes smaller.",
        "scripts/eval.py": eval_py,
    }
    return write_tree(parent / "benchmarks" / name, files)


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv(CACHE_VAR, str(where))
    return where


def baseline_run(source: Path, runs: Path, *extra: str) -> tuple[int, list[ev.Event]]:
    before = set(runs.iterdir()) if runs.exists() else set()
    code = mlra_main(
        ["run", str(source), "--model", "baseline", "--no-tui", "--runs-dir", str(runs), *extra]
    )
    (run_dir,) = set(runs.iterdir()) - before
    return code, read_events(run_dir / "events.jsonl")


def notices(events: list[ev.Event]) -> list[str]:
    return [e.message for e in events if isinstance(e, ev.Notice)]


def graded(events: list[ev.Event]) -> ev.EvaluationFinished:
    return next(e for e in events if isinstance(e, ev.EvaluationFinished))


# --- a baseline is a measurement that succeeded ------------------------------------


def test_a_failed_starter_records_no_baseline_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vectorization's starter fails on numpy 2 and its eval.py then returns 1e10: that
    must not become the baseline (every later run would be a "success")."""
    runs = tmp_path / "runs"
    crashing = folder(tmp_path, "crashing", "raise SystemExit('numpy 2: bad array')\n")
    _, events = baseline_run(crashing, runs)
    assert graded(events).score is None  # 1e10 is the evaluator failing, not a score
    assert "1e+10 is the value the evaluator returns when it fails" in str(graded(events).error)
    assert score_line(graded(events)) == (  # said once, as the run's last line shows it
        "no score: 1e+10 is the value the evaluator returns when it fails"
    )
    (said,) = [n for n in notices(events) if "baseline" in n]
    assert said.startswith("no baseline recorded for mlagentbench-crashing: the recipe failed")
    prepared = load_task(crashing)
    assert prepared.metric.baseline is None
    assert not (prepared.root / BASELINE_FILE).exists()

    # A recipe that exits 0 but leaves nothing to grade: the grading's failure, said.
    silent = folder(tmp_path, "silent", "pass\n")
    _, events = baseline_run(silent, runs)
    (said,) = [n for n in notices(events) if "baseline" in n]
    assert "no baseline recorded" in said and "the grading failed" in said and "1e+10" in said
    assert load_task(silent).metric.baseline is None


def test_baseline_runs_are_listed_averaged_and_can_be_cleared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    source = folder(tmp_path, "timed", 'open("submission.csv", "w").write("4.0\\n")\n')
    _, first = baseline_run(source, runs)
    assert any(n.startswith("the baseline of mlagentbench-timed is now 4") for n in notices(first))
    task = load_task(source)
    assert task.metric.baseline == 4.0
    # A file from before failures were refused, holding one: dropped when read.
    record = task.root / BASELINE_FILE
    data = json.loads(record.read_text())
    data["runs"].append({"score": 1e10, "run": "old-failure", "measured_at": None})
    record.write_text(json.dumps(data))
    assert load_task(source).metric.baseline == 4.0
    capsys.readouterr()
    assert mlra_main(["tasks", "show", str(source)]) == 0
    out = capsys.readouterr().out
    assert "baseline runs: 1 recorded" in out
    (run_id,) = [e.run_id for e in first if isinstance(e, ev.RunStarted)]
    assert f"  4  {run_id}" in out and "old-failure" not in out
    # The commands said name the folder given, not its prepared copy in the cache.
    assert f"  clear them: mlra tasks clear-baseline {source} [RUN_ID]" in out, out
    assert f"(`mlra tasks env {source}`)" in out, out
    assert mlra_main(["tasks", "clear-baseline", str(source)]) == 0
    assert "cleared 1 baseline run" in capsys.readouterr().out
    assert load_task(source).metric.baseline is None


def test_baseline_runs_of_a_batch_sharing_the_machine_are_kept_not_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vectorization's run time was 3.8 s alone and 9.4 s and 8.5 s in a `--parallel 2`
    batch; their mean, 7.2, made the unchanged starter a "success". Runs beside others
    are recorded and listed, and the baseline is the mean of those that ran alone."""
    runs = tmp_path / "runs"
    source = folder(tmp_path, "timed", 'open("submission.csv", "w").write("4.0\\n")\n')
    baseline_run(source, runs)
    capsys.readouterr()
    argv = ["batch", "--tasks", str(source), "--models", "baseline", "--seeds", "2"]
    out = tmp_path / "b"
    assert mlra_main([*argv, "--parallel", "2", "--out", str(out), "--no-tui"]) == 0
    said = capsys.readouterr().out
    assert (
        "batch: the baseline runs of mlagentbench-timed run 2 at once here: their scores are "
        "kept beside each task and not counted in its measured baseline"
    ) in said, said
    for log in out.glob("runs/*/events.jsonl"):
        (note,) = [n for n in notices(read_events(log)) if "baseline of" in n]
        assert note.startswith(
            "not counted in the baseline of mlagentbench-timed: this run shared the machine "
            "with 1 other run of a batch"
        ), note
        assert "it stays 4, one run's alone (this run: 4, kept in" in note, note
    # As they were measured under load: slower, and still not the baseline.
    task = load_task(source)
    record = task.root / BASELINE_FILE
    data = json.loads(record.read_text())
    assert [r["shared_by"] for r in data["runs"]] == [1, 2, 2]
    for r, slow in zip(data["runs"][1:], (9.38, 8.5), strict=True):
        r["score"] = slow
    record.write_text(json.dumps(data))
    assert load_task(source).metric.baseline == 4.0
    assert mlra_main(["tasks", "show", str(source)]) == 0
    shown = capsys.readouterr().out
    assert "baseline runs: 3 recorded (the baseline is the mean of the 1 that ran alone)" in shown
    assert shown.count(", ran alone)") == 1, shown
    assert shown.count(", beside 1 other run of a batch; not counted)") == 2, shown
    assert "  9.38  " in shown and "  8.5  " in shown


# --- direction and success: known by content, else asked for ------------------------


def test_an_unrecognized_evaluator_scores_without_judging_success(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error metric in a folder mlra cannot recognize: scored, success not judged,
    and every display says how to state the direction; stated, it is judged."""
    runs = tmp_path / "runs"
    source = folder(tmp_path, "house-prices-mine", 'open("submission.csv", "w").write("9\\n")\n')
    task = load_task(source)
    assert not task.metric.direction_known
    assert "(which way its score improves is not stated, so no success is judged" in (
        task.render_prompt()
    )
    _, events = baseline_run(source, runs)
    finished = graded(events)
    assert (finished.score, finished.success, finished.direction_known) == (9.0, None, False)
    out = capsys.readouterr().out
    assert "(success not judged: which way the score improves is unknown; state it" in out
    assert "--direction higher|lower" in out

    # Stated on the command line for one run: a better (lower) score beats the baseline.
    # (The prepared copy's starter changed in place, standing in for an agent's better
    # work: the copy, and the baseline recorded beside it, stay the same.)
    copy = load_task(source).root
    (copy / "env" / "train.py").write_text('open("submission.csv", "w").write("5\\n")\n')
    with pytest.raises(SystemExit) as refused:
        mlra_main(["run", str(source), "--model", "baseline", "--direction", "sideways"])
    assert refused.value.code == 2
    _, events = baseline_run(source, runs, "--direction", "lower", "--seed", "1")
    finished = graded(events)
    assert (finished.score, finished.baseline, finished.success) == (5.0, 9.0, True)
    assert finished.success_bar == "relative_improvement: score < 8.1, 10% over baseline 9"

    # Stated once for good, in the folder's mlra.toml: read live, no new prepared copy.
    (source / "mlra.toml").write_text('[metric]\nname = "mae"\nhigher_is_better = false\n')
    stated = load_task(source)
    assert stated.root == copy  # not prepared again
    assert (stated.metric.name, stated.metric.higher_is_better) == ("mae", False)
    assert stated.metric.direction_known
    assert "run host-side after the run (mae: lower is better)" in stated.render_prompt()
    capsys.readouterr()
    assert mlra_main(["tasks", "show", str(source)]) == 0
    assert "metric:     mae (lower is better)" in capsys.readouterr().out
    (source / "mlra.toml").write_text("[evaluator]\nkind = 'lm-eval'\n")
    assert mlra_main(["tasks", "show", str(source)]) == 2
    assert "only [metric] may be stated here" in capsys.readouterr().err


def test_the_benchmarks_own_evaluator_is_recognized_by_content_and_self_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder whose eval.py is one mlra knows (registered here by its fingerprint, as
    MLAgentBench's are) takes its direction and marks; a self-reported score is marked
    in the score line, result.json, `mlra runs` and the prompt, and is no success."""
    source = folder(tmp_path, "anything", 'open("submission.csv", "w").write("0.000001\\n")\n')
    comments = "# the same evaluator, commented\n\n" + READ_SUBMISSION.replace("\n", "\n\n")
    (source / "scripts" / "eval.py").write_text(comments)
    fingerprint = known.fingerprint(READ_SUBMISSION.encode())
    assert known.fingerprint(comments.encode()) == fingerprint
    monkeypatch.setitem(
        known.MLAGENTBENCH,
        fingerprint,
        known.KnownEvaluator(
            "timing",
            "run time (s)",
            False,
            (0.0, float("inf")),
            self_reported="the workspace writes its own run time",
            failure_values=(1e10,),
        ),
    )
    task = load_task(source)
    assert (task.metric.name, task.metric.higher_is_better) == ("run time (s)", False)
    assert "The score is self-reported: the workspace writes its own run time" in (
        task.render_prompt()
    )
    runs = tmp_path / "runs"
    _, events = baseline_run(source, runs)
    finished = graded(events)
    assert finished.self_reported == "the workspace writes its own run time"
    assert "· SELF-REPORTED" in capsys.readouterr().out
    (run_dir,) = runs.iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["self_reported"] == "the workspace writes its own run time"
    assert mlra_main(["runs", "--runs-dir", str(runs)]) == 0
    out, err = capsys.readouterr()
    assert "0.000001" not in out and "1e-06^" in out
    assert "^ self-reported, not measured (mlagentbench-anything" in err


def test_the_success_rules_as_the_benchmarks_count_them() -> None:
    mlrc = Metric(name="score", baseline=0.0, top=1.0, success_strictly_above=True)
    assert success_of(mlrc, 0.05) is False  # MLRC-Bench: strictly above 5% of the gap
    assert success_of(mlrc, 0.0501) is True
    assert success_bar(mlrc) == "gap_fraction: normalized > 0.05"
    assert success_of(Metric(name="score", baseline=0.0, top=1.0), 0.05) is True
    unknown = Metric(name="score", baseline=1.0, direction_known=False)
    assert success_of(unknown, 100.0) is None
    assert str(success_bar(unknown)).startswith("not judged: which way the score improves")


def test_mlrc_bench_published_numbers_are_complete_and_found_by_content(tmp_path: Path) -> None:
    assert PUBLISHED["erasing_invisible_watermarks"] == {
        "dev": -1.00034643,
        "test": -1.001120229,
        "top": -0.04363443074502975,
    }
    assert PUBLISHED["weather_forcast"] == {"top": 0.1014596}  # its baseline is measured
    renamed = tmp_path / "my-copy"
    (renamed / "env").mkdir(parents=True)
    (renamed / "env" / "main.py").write_text('TASK_NAME = "meta-learning"\n')
    assert published_name(renamed, "my-copy") == "meta-learning"
    (renamed / "env" / "main.py").write_text('TASK_NAME = "not-one-of-theirs"\n')
    assert published_name(renamed, "my-copy") == "my-copy"


# --- seeds reach the recipes --------------------------------------------------------


SEEDED_TASK = """\
name = "seeded"
title = "A recipe that takes the run's seed"

[prompt]
task = "Write a number."

[files]
starter = ["starter"]
hidden = ["hidden"]

[metric]
name = "value"

[evaluator]
kind = "script"
artifact = "out.txt"
settings = { script = "hidden/score.py" }

[baseline]
submit = "out.txt"

[[baseline.steps]]
title = "Write the seed"
command = "python write.py --seed {seed}"
"""

SCORE_PY = """\
import json, sys
artifact, root, out = sys.argv[1:4]
json.dump({"score": float(open(artifact).read())}, open(out, "w"))
"""


def seeded_task(tmp_path: Path) -> Path:
    files = {
        "task.toml": SEEDED_TASK,
        "starter/write.py": "import sys\nopen('out.txt', 'w').write(sys.argv[2])\n",
        "hidden/score.py": SCORE_PY,
    }
    return write_tree(tmp_path / "seeded", files)


def test_a_batch_of_baseline_seeds_reseeds_the_recipe(tmp_path: Path) -> None:
    """`mlra batch --models baseline --seeds 2` runs the recipe with seeds 1 and 2: two
    scores and a spread, not one number twice and "± 0"; a run given no seed, 0."""
    task = seeded_task(tmp_path)
    _, events = baseline_run(task, tmp_path / "runs")
    assert graded(events).score == 0.0
    out = tmp_path / "batch"
    argv = ["batch", "--tasks", str(task), "--models", "baseline", "--seeds", "2"]
    assert mlra_main([*argv, "--out", str(out), "--no-tui"]) == 0
    scores = sorted(json.loads(p.read_text())["score"] for p in out.glob("runs/*/result.json"))
    assert scores == [1.0, 2.0]
    report = (out / "report.md").read_text()
    assert "1.5000 ± 0.5000" in report


def test_an_imported_folder_needs_only_its_direction_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After `mlra tasks import`, the task.toml says the direction is unknown; writing
    `higher_is_better` is all it takes to have success judged."""
    source = folder(tmp_path, "mine", 'open("submission.csv", "w").write("3\\n")\n')
    out = tmp_path / "imported"
    assert mlra_main(["tasks", "import", str(source), str(out)]) == 0
    toml = (out / "task.toml").read_text()
    assert "direction_known = false" in toml and "higher_is_better" not in toml.split("[metric]")[1]
    assert not load_task(out).metric.direction_known
    (out / "task.toml").write_text(
        toml.replace("[metric]\n", "[metric]\nhigher_is_better = false\n")
    )
    stated = load_task(out)
    assert (stated.metric.direction_known, stated.metric.higher_is_better) == (True, False)


def test_a_batch_states_the_direction_and_says_when_success_is_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = folder(tmp_path, "errors", 'open("submission.csv", "w").write("7\\n")\n')
    argv = ["batch", "--tasks", str(source), "--models", "baseline", "--no-tui"]
    assert mlra_main([*argv, "--out", str(tmp_path / "b1")]) == 0
    out = capsys.readouterr().out
    assert "success not judged" in out  # not "success 0%": nothing could be judged
    assert "| not judged |" in (tmp_path / "b1" / "report.md").read_text()
    assert mlra_main([*argv, "--out", str(tmp_path / "b2"), "--direction", "lower"]) == 0
    (result,) = (tmp_path / "b2").glob("runs/*/result.json")
    data = json.loads(result.read_text())
    assert data["direction_known"] is True and data["success"] is not None
    # A direction contrary to what a task's own files say is refused before any run.
    seeded = seeded_task(tmp_path)
    code = mlra_main(
        ["batch", "--tasks", str(seeded), "--models", "baseline", "--direction", "lower",
         "--out", str(tmp_path / "b3"), "--no-tui"]
    )  # fmt: skip
    assert code == 2 and "already higher-is-better" in capsys.readouterr().err


def test_a_published_top_without_a_baseline_measures_the_baseline(tmp_path: Path) -> None:
    """MLRC-Bench publishes weather_forcast's top and no baseline: baseline runs of it
    are recorded (found by main.py's TASK_NAME, whatever the folder's name)."""
    from tests.tasks.test_foreign_tasks import mlrc_task

    source = mlrc_task(tmp_path)
    main = source / "env" / "main.py"
    main.write_text(main.read_text().replace('"meta-learning"', '"weather_forcast"'))
    yml = source / "scripts" / "environment.yml"
    yml.write_text(yml.read_text().replace("    - surely-not-installed-pkg==1.0\n", ""))
    task = load_task(source)
    assert (task.metric.baseline, task.metric.top) == (None, 0.1014596)
    _, events = baseline_run(source, tmp_path / "runs")
    assert any(n.startswith("the baseline of mlrcbench-") for n in notices(events)), notices(events)
    assert load_task(source).metric.baseline == graded(events).score
