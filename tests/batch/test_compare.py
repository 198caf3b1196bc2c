"""The comparison's pure functions (batch/compare/) on recorded logs: the matrix, its
settings diff, the paired table, the overlaid curves and the diffs."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlra import events as ev
from mlra.batch.compare import matrix, overlay, paired
from mlra.batch.compare.diffs import prompts_diff, settings_diff
from mlra.batch.compare.runs import CompareError, expand, load, load_all
from tests.batch.compare_runs import compared_run
from tests.conftest import BaselineRun, run_baseline


def _row(m: matrix.Matrix, name: str) -> list[str]:
    return next(r.cells for r in m.rows if r.name.startswith(name))


def test_matrix_stars_the_best_by_the_metrics_direction(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    a = compared_run(runs, "a", score=0.5)
    b = compared_run(runs, "b", score=0.8, model="m2", config={"temperature": 0.7})
    m = matrix.build(load_all([a, b]))
    assert m.runs == ["a", "b"]
    assert _row(m, "exact_match ↑") == ["0.5", "0.8*"]
    assert _row(m, "status") == ["finished (submitted)"] * 2
    assert _row(m, "verdict") == ["not judged"] * 2  # no success rule recorded
    assert _row(m, "tokens") == ["1.2k"] * 2
    # Only the differing settings, the alike ones counted.
    settings = [r for r in m.rows if r.section == "settings"]
    assert [(r.name, r.cells) for r in settings] == [("temperature", ["null", "0.7"])]
    assert m.same_hidden > 3
    every = matrix.build(load_all([a, b]), all_settings=True)
    assert "fetch.allow_hosts" in [r.name for r in every.rows] and every.same_hidden == 0

    low = tmp_path / "low"
    c = compared_run(low, "c", score=0.5, higher_is_better=False)
    d = compared_run(low, "d", score=0.8, higher_is_better=False)
    m = matrix.build(load_all([c, d]))
    assert _row(m, "exact_match ↓") == ["0.5*", "0.8"]


def test_settings_only_a_search_reads_are_left_out_of_a_run_that_did_not_search(
    tmp_path: Path,
) -> None:
    """A run with no search listed `attempts 4`, the default, as if it had made four."""
    runs = tmp_path / "runs"
    # A recorded config holds every setting, the search's defaults too.
    plain = compared_run(runs, "plain", score=0.5, config={"search": "none", "attempts": 4})
    other = compared_run(runs, "other", score=0.6, config={"search": "none", "attempts": 4})
    searched = compared_run(runs, "s", score=0.8, config={"search": "greedy", "attempts": 2})
    every = matrix.build(load_all([plain, other]), all_settings=True)
    assert "attempts" not in [r.name for r in every.rows if r.section == "settings"]
    m = matrix.build(load_all([plain, searched]))
    settings = {r.name: r.cells for r in m.rows if r.section == "settings"}
    assert settings["attempts"] == ["(unset)", "2"]


def test_the_best_is_starred_among_each_tasks_runs(tmp_path: Path) -> None:
    """A batch folder of two tasks: their scores are no one scale. The best of each task's
    runs is starred, and runs of different metrics are not labelled with the first one's
    (before: "mean_accuracy ↑" over tiny-lm's minimal_pair_accuracy, one star, tiny-lm's)."""
    runs = tmp_path / "runs"
    merged = [
        compared_run(runs, f"m{i}", task="merge", score=s, metric="mean_accuracy")
        for i, s in enumerate((0.53, 0.51))
    ]
    lm = [
        compared_run(runs, f"t{i}", task="lm", score=s, metric="pair_accuracy")
        for i, s in enumerate((0.82, 0.76))
    ]
    m = matrix.build(load_all([*merged, *lm]))
    assert _row(m, "score") == ["0.53*", "0.51", "0.82*", "0.76"]
    assert m.metric == "score"
    assert m.best_of == " of each task's runs, each in its task's metric"
    same_metric = [compared_run(tmp_path / "s", n, task=n, score=0.5) for n in ("x", "y")]
    m = matrix.build(load_all(same_metric))
    assert _row(m, "exact_match ↑") == ["0.5*", "0.5*"] and m.best_of == " of each task's runs"
    one_task = matrix.build(load_all(merged))
    assert _row(one_task, "mean_accuracy ↑") == ["0.53*", "0.51"] and one_task.best_of == ""


def test_metric_picks_a_curve_or_a_validation_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    a = compared_run(runs, "a", losses=(2.0, 1.0))
    b = compared_run(runs, "b", losses=(2.0, 0.5), validations=(0.9,))
    both = load_all([a, b])
    assert _row(matrix.build(both, "loss"), "loss ↓") == ["1", "0.5*"]
    assert _row(matrix.build(both, "accuracy"), "accuracy ↑") == ["0.45", "0.9*"]
    with pytest.raises(CompareError, match="unknown metric 'nope'"):
        matrix.build(both, "nope")


def test_an_unknown_metric_is_answered_with_every_name_or_says_how_many_more(
    tmp_path: Path,
) -> None:
    """The names were cut at 8 without a word: tiny-lm's ten (its numbers and lm-eval's)
    left out `valid`, its validation loss, the one a user comparing runs looks for."""
    runs = tmp_path / "runs"
    names = ["d", "layers", "tokenizer", "valid", *(f"lm/m{i}" for i in range(5))]
    points = [ev.MetricPoint(name=n, value=1.0, step=100, wall=1.0) for n in names]
    more = (ev.Metrics(source="command:c1", call_id="c1", points=points),)
    both = load_all([compared_run(runs, n, more=more) for n in ("a", "b")])
    with pytest.raises(CompareError) as refused:
        matrix.build(both, "val_loss")
    said = str(refused.value)
    assert said.endswith(", tokenizer, valid") and "more" not in said, said
    many = tuple(ev.MetricPoint(name=f"s{i:02}", value=1.0, wall=1.0) for i in range(40))
    more = (ev.Metrics(source="command:c1", call_id="c1", points=list(many)),)
    lots = load_all([compared_run(tmp_path / "lots", n, more=more) for n in ("a", "b")])
    with pytest.raises(CompareError, match=r"and \d+ more$"):
        matrix.build(lots, "val_loss")


def test_a_running_run_and_bad_input(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    a = compared_run(runs, "a")
    b = compared_run(runs, "b", finished=False)
    m = matrix.build(load_all([a, b]))
    assert _row(m, "status")[1] == "interrupted"  # no ending, no writer
    assert _row(m, "exact_match")[1] == "-"
    with pytest.raises(CompareError, match="at least 2 runs"):
        load_all([a])
    with pytest.raises(CompareError, match="no such run"):
        expand([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(CompareError, match="neither a run folder"):
        expand([tmp_path / "empty"])
    # A folder of runs (or a batch's) is its runs, each once.
    assert expand([runs, a]) == [a, b]


def test_paired_by_model_counts_wins_losses_and_ties(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    dirs = [
        compared_run(runs, "t1-m1", task="t1", model="m1", score=0.5),
        compared_run(runs, "t1-m2", task="t1", model="m2", score=0.7),
        compared_run(runs, "t2-m1", task="t2", model="m1", score=0.9),
        compared_run(runs, "t2-m2", task="t2", model="m2", score=0.6),
        compared_run(runs, "t3-m1", task="t3", model="m1", score=0.4),
        compared_run(runs, "t3-m2", task="t3", model="m2", score=0.4),
    ]
    (table,) = paired.paired(load_all(dirs))
    assert (table.a, table.b, table.by) == ("m1", "m2", "model")
    assert [(r.task, r.outcome) for r in table.rows] == [
        ("t1", "win"),
        ("t2", "loss"),
        ("t3", "tie"),
    ]
    assert (table.wins, table.losses, table.ties) == (1, 1, 1)
    assert table.rows[0].diff == pytest.approx(0.2)


def test_paired_by_settings_where_one_model_ran(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    a = compared_run(runs, "a", score=0.5)
    b = compared_run(runs, "b", score=0.3, config={"temperature": 0.7})
    (table,) = paired.paired(load_all([a, b]))
    assert table.by == "settings" and table.b == "temperature=0.7"
    assert (table.wins, table.losses) == (0, 1)


def test_each_paired_side_says_how_many_runs_its_mean_is_over(tmp_path: Path) -> None:
    """Two seeds of m1 (and a third killed, unscored) against one run of m2: each side
    is a mean over unequal numbers of runs, and the text, the report and the shared
    page showed the means alone, as if like for like."""
    from mlra.batch.report import write_report
    from mlra.batch.share.batch_page import write_batch_page
    from mlra.console.text.compare_text import paired_text

    runs = tmp_path / "b1" / "runs"
    dirs = [
        compared_run(runs, "a1", model="m1", score=0.4, config={"seed": 1}),
        compared_run(runs, "a2", model="m1", score=0.6, config={"seed": 2}),
        compared_run(runs, "a3", model="m1", finished=False, config={"seed": 3}),
        compared_run(runs, "b1", model="m2", score=0.7),
    ]
    (table,) = paired.paired(load_all(dirs))
    (row,) = table.rows
    assert (row.a_n, row.a_runs, row.b_n, row.b_runs) == (2, 3, 1, 1)
    assert "answer  0.5 (n=2 of 3)  0.7 (n=1)     +0.2  win" in paired_text(table)
    write_report(tmp_path / "b1", plots=False)
    report = (tmp_path / "b1" / "report.md").read_text(encoding="utf-8")
    assert "| answer | 0.5 (n=2 of 3) | 0.7 (n=1) | +0.2 | win |" in report
    page = tmp_path / "b1.html"
    write_batch_page(tmp_path / "b1", page)
    assert '<td class="num">0.5 (n=2 of 3)</td><td class="num">0.7 (n=1)</td>' in page.read_text(
        encoding="utf-8"
    )


def test_overlay_one_panel_a_scale_and_best_so_far(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    a = compared_run(runs, "a", validations=(0.3, 0.2, 0.5))
    b = compared_run(runs, "b", losses=(3.0, 2.0))
    loaded = load_all([a, b])
    shown = overlay.overlay(loaded, "step")
    assert shown.panels == {"loss": "loss", "score": "acc"}
    losses = shown.lines["loss"]
    assert [(line.run, line.x) for line in losses] == [
        (0, [100.0, 200.0, 300.0, 400.0]),
        (1, [100.0, 200.0]),
    ]
    by_time = overlay.overlay(loaded, "time")
    assert by_time.lines["loss"][1].x == [10.0, 20.0]
    best = overlay.best_so_far(loaded)
    # The best so far never goes down, drawn as stairs.
    assert list(zip(best[0].x, best[0].y, strict=True)) == [
        (70.0, 0.3),
        (80.0, 0.3),
        (90.0, 0.3),
        (90.0, 0.5),
    ]
    assert overlay.colour(0) != overlay.colour(1)
    assert overlay.panel_of("val_err", [0.1]) == "loss"
    assert overlay.panel_of("bits", [0.2, 0.9]) == "score"
    assert overlay.panel_of("bits", [2.0, 0.9]) == "loss"


def test_settings_and_prompts_diff(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    a = load(compared_run(runs, "a", prompt="Note: 10 minutes left."))
    b = load(compared_run(runs, "b", prompt="Note: 5 minutes left.", config={"seed": 2}))
    text = settings_diff(a, b)
    assert "- seed: 1" in text and "+ seed: 2" in text and "temperature" not in text
    diff = prompts_diff(a, b)
    assert "-Note: 10 minutes left." in diff and "+Note: 5 minutes left." in diff


def test_real_runs_compare(answer_task: Path, tmp_path: Path) -> None:
    """Two real baseline runs of the test task (one with a step limit): the matrix reads
    their logs as `mlra run` wrote them."""
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first: BaselineRun = run_baseline(answer_task, tmp_path / "one", "--isolation", "none")
    second = run_baseline(answer_task, tmp_path / "two", "--isolation", "none", "--max-steps", "30")
    m = matrix.build(load_all([first.run_dir, second.run_dir]))
    assert _row(m, "status") == ["finished (submitted)"] * 2
    assert _row(m, "exact_match") == ["1*", "1*"]
    assert [(r.name, r.cells) for r in m.rows if r.section == "settings"] == [
        ("max_steps", ["null", "30"])
    ]


def test_a_searchs_submitted_files_are_its_attempts_graded_copy(
    answer_task: Path, tmp_path: Path
) -> None:
    """`d` on the compare screen diffed a search's empty `submission/`: every file of the
    other run's shown as gone, where the search handed in attempt a3's copy."""
    from mlra.console.text.attempt_files import workspaces_diff
    from tests.agent.test_search import _variant_task

    task = _variant_task(answer_task, tmp_path)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    line = run_baseline(answer_task, tmp_path / "one", "--isolation", "none")
    search = run_baseline(
        task, tmp_path / "two", "--isolation", "none", "--search", "greedy", "--attempts", "3"
    )
    a, b = load_all([line.run_dir, search.run_dir])
    assert b.frozen is not None and b.frozen.startswith("attempts/a3/")
    assert (b.submission_dir / "answer.txt").read_text() == "42\n"
    assert workspaces_diff(a.submission_dir, b.submission_dir, a.id, b.id) == ""
    assert a.submission_dir == line.run_dir / "submission"


def test_report_compares_each_tasks_runs_with_agent_text_escaped(tmp_path: Path) -> None:
    from mlra.batch.report import write_report

    runs = tmp_path / "runs"
    compared_run(runs, "t1-a", task="t1", model="m1", score=0.5, config={"seed": 1})
    compared_run(
        runs,
        "t1-b",
        task="t1",
        model="m<img src=x onerror=alert(1)>",
        score=0.7,
        config={"seed": 2},
    )
    compared_run(runs, "t2-a", task="t2", model="m1", score=0.9)
    compared_run(runs, "t2-b", task="t2", model="m<img src=x onerror=alert(1)>", score=0.8)
    write_report(tmp_path, plots=False)
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    section = text[text.index("## Runs compared") :]
    assert "### t1" in section and "### t2" in section
    assert "| exact_match ↑ | 0.5 | 0.7\\* |" in section
    # The settings that differ come under their own heading, not as more outcomes.
    t1 = section[: section.index("### t2")]
    assert t1.index("| *settings* | | |") < t1.index("| seed | 1 | 2 |")
    assert "<img" not in section and "&lt;img" in section
    assert "1 wins, 1 losses, 0 ties" in section


def test_a_run_going_on_and_a_log_from_an_older_mlra(tmp_path: Path) -> None:
    """A log still held open compares as running; a log whose run_started lacks what
    later versions record (config, mlra version, budget) compares with what it has."""
    import json

    from mlra import events as ev
    from mlra.agent.record.eventlog import EVENTS_FILE, EventLog

    runs = tmp_path / "runs"
    done = compared_run(runs, "done")
    older = compared_run(runs, "older", score=0.9)
    lines = (older / EVENTS_FILE).read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    for name in ("config", "mlra_version", "budget"):
        first.pop(name, None)
    (older / EVENTS_FILE).write_text(
        "\n".join([json.dumps(first), *lines[1:]]) + "\n", encoding="utf-8"
    )
    (older / "result.json").unlink()
    live = EventLog(runs / "live" / EVENTS_FILE)
    try:
        sandbox = ev.SandboxInfo(
            kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/w"
        )
        live.append(
            ev.RunStarted(
                run_id="live",
                task="answer",
                task_title="A",
                model="m1",
                limits=ev.Limits(time_limit_s=60),
                sandbox=sandbox,
            )
        )
        m = matrix.build(load_all([done, older, runs / "live"]))
    finally:
        live.close()
    assert _row(m, "status") == ["finished (submitted)", "finished (submitted)", "running"]
    assert _row(m, "exact_match") == ["0.5", "0.9*", "-"]
    assert _row(m, "mlra_version") == ["0.1.0", "(older)", "(older)"]


def test_overlay_keeps_each_tasks_curves_apart(tmp_path: Path) -> None:
    """A language model's loss of 5 and a classifier's 0.2 on one axis flattened the
    classifier's to a line at the bottom: two tasks' curves are no one scale, as their
    scores are not. Each task has its own panels, named after it, each with its runs."""
    runs = tmp_path / "runs"
    small = compared_run(runs, "cls", task="classify", losses=(0.5, 0.3, 0.2))
    big = compared_run(runs, "lm", task="lm", losses=(5.2, 4.6, 4.4), accs=(0.6, 0.7))
    also = compared_run(runs, "cls2", task="classify", losses=(0.6, 0.4))
    shown = overlay.overlay(load_all([small, big, also]), "step")
    assert list(shown.panels) == [
        "loss · classify",
        "score · classify",
        "loss · lm",
        "score · lm",
    ]
    assert [line.run for line in shown.lines["loss · classify"]] == [0, 2]
    assert [line.run for line in shown.lines["loss · lm"]] == [1]
    assert max(v for line in shown.lines["loss · classify"] for v in line.y) == 0.6
