"""The command line as a newcomer meets it: every subcommand answers bad input (a
runs folder that is a file or lies under one, a duration of nan or inf, a folder
that is not a run) with one line and exit status 2, and a run whose reader goes
away (`mlra run ... | head`) goes on to its end with its log whole."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from tests.conftest import ANSWER_RECIPE, ANSWER_TASK, answer_copy, mlra_cli


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished baseline run, for the subcommands that take one."""
    tmp = tmp_path_factory.mktemp("recorded")
    proc = mlra_cli(
        ["run", str(ANSWER_TASK), "--model", "baseline", "--no-tui", "--runs-dir", "runs"],
        cwd=tmp,
    )
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (tmp / "runs").iterdir()
    return run_dir


# `{file}` is a plain file, `{notrun}` an empty folder, `{run}` a finished run.
BAD_INPUT = [
    (["run", "{answer}", "--model", "baseline", "--runs-dir", "{file}"], "is not a folder"),
    (
        ["run", "{answer}", "--model", "baseline", "--runs-dir", "{file}/runs"],
        "is not a folder ({file} is a file)",
    ),
    (["run", "{answer}", "--model", "baseline", "--time-limit", "nan"], "'nan' is not a duration"),
    (["run", "{answer}", "--model", "baseline", "--time-limit", "inf"], "'inf' is not a duration"),
    (["run", "{answer}", "--model", "baseline", "--command-timeout", "inf"], "not a duration"),
    (["run", "no-such-task", "--model", "baseline"], "unknown task 'no-such-task'"),
    (["run", "{answer}", "--model", "baseline", "--memory", "-1g"], "'-1g' is too small"),
    (["run", "{answer}", "--model", "baseline", "--time-limit", "-5m"], "'-5m' is not a"),
    (["run", "{answer}", "--model", "replay:{notrun}"], "is not a run folder"),
    (["run", "{answer}", "--model", "baseline", "--run-id", "../x"], "--run-id"),
    (
        ["run", "{answer}", "--model", "openai/m", "--base-url", "localhost:8000"],
        "--base-url 'localhost:8000' is not an http(s) URL",
    ),
    (
        ["batch", "--tasks", "{answer}", "--models", "openai/m", "--base-url", "127.0.0.1:8000/v1"],
        "is not an http(s) URL",
    ),
    (["batch", "--tasks", "{answer}", "--models", "baseline", "--out", "{file}"], "not a folder"),
    (
        ["batch", "--tasks", "{answer}", "--models", "baseline", "--out", "{file}/b"],
        "({file} is a file)",
    ),
    (
        ["batch", "--tasks", "{answer}", "--models", "baseline", "--time-limit", "inf"],
        "'inf' is not a duration",
    ),
    (["batch", "--tasks", "no-such-task", "--models", "baseline"], "unknown task"),
    (["fork", "{run}", "--at", "1", "--runs-dir", "{file}/runs"], "({file} is a file)"),
    (["fork", "{run}", "--at", "1", "--time-limit", "nan"], "'nan' is not a duration"),
    (["fork", "{run}", "--at", "99"], "99"),
    (["fork", "{notrun}", "--at", "1"], "is not a run folder"),
    (["resume", "{run}", "--time-limit", "inf"], "'inf' is not a duration"),
    (["resume", "{notrun}"], "is not a run folder"),
    (["resume", "{file}"], "is not a run folder"),
    (["eval", "{notrun}"], "is not a run folder"),
    (["replay", "{notrun}", "--no-tui"], "is not a run folder"),
    (["replay", "{run}", "--no-tui", "--at", "99"], "no worker step 99"),
    (["runs", "--runs-dir", "{file}"], "is not a folder of runs"),
    (["report", "{file}"], "is not a folder"),
    (["report", "{notrun}"], "no runs in"),
    (["tasks", "no-such-task"], "unknown task 'no-such-task'"),
    (["tasks", "tiny-lm", "answer"], "one task at a time"),
]


@pytest.mark.parametrize(("args", "expected"), BAD_INPUT, ids=lambda a: " ".join(a)[:60])
def test_bad_input_to_every_subcommand_is_one_line_and_exit_2(
    tmp_path: Path, recorded: Path, args: list[str], expected: str
) -> None:
    names = {"answer": ANSWER_TASK, "file": "afile", "notrun": "notrun", "run": recorded}
    (tmp_path / "afile").write_text("not a folder\n")
    (tmp_path / "notrun").mkdir()
    before = sorted(p.name for p in tmp_path.rglob("*"))
    proc = mlra_cli([a.format(**names) for a in args], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert expected.format(**names) in lines[0]
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing made, nothing written


def test_a_disk_quota_the_runs_disk_cannot_hold_is_refused_before_the_run(
    tmp_path: Path,
) -> None:
    """Where the quota is a volume set aside whole (root, loop devices), a `--disk` that
    would take the runs disk's reserve was a traceback and a run folder ending in error."""
    from mlra.tools.sandbox import volume

    if volume.unavailable() is not None:
        pytest.skip(f"no workspace volume here ({volume.unavailable()}): nothing is set aside")
    args = ["run", str(ANSWER_TASK), "--model", "baseline", "--no-tui", "--disk", "1000t"]
    proc = mlra_cli(args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "--disk 1,048,576,000 MB would leave" in lines[0] and "ask for at most" in lines[0]
    assert list(tmp_path.iterdir()) == []  # no runs folder, no run


def test_tasks_name_shows_the_task(tmp_path: Path) -> None:
    shown = mlra_cli(["tasks", "tiny-lm"], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "metric:" in shown.stdout and "Pretrain" in shown.stdout
    assert shown.stdout == mlra_cli(["tasks", "show", "tiny-lm"], cwd=tmp_path).stdout


def test_report_on_a_folder_without_runs_writes_nothing_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "empty" / "not-a-run").mkdir(parents=True)
    proc = mlra_cli(["report", "empty"], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "mlra: report: no runs in empty, so no report was written"
    assert [p.name for p in (tmp_path / "empty").iterdir()] == ["not-a-run"]


def _waiting_task(tmp_path: Path) -> Path:
    """The answer task, its baseline recipe waiting for a file `go` in the workspace:
    the run is still going when the test closes the pipe, whatever the machine's speed."""
    waiting = 'command = "while [ ! -e go ]; do sleep 0.05; done; echo 42 > answer.txt"'
    return answer_copy(tmp_path / "waiting", (ANSWER_RECIPE, waiting))


@pytest.mark.parametrize("mode", ["--no-tui", "--json"])
def test_a_run_whose_reader_leaves_goes_on_to_its_end_with_its_log_whole(
    tmp_path: Path, mode: str
) -> None:
    """`mlra run ... | head -1`: a real pipe whose reader reads one line and goes."""
    task = _waiting_task(tmp_path)
    args = ["run", str(task), "--model", "baseline", mode, "--runs-dir", "runs", "--run-id", "r"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlra", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        first = proc.stdout.readline()  # the run has started: its first event is printed
        assert first, proc.stderr.read()
        proc.stdout.close()  # the reader goes, as `head -1` does
        (tmp_path / "runs" / "r" / "workspace" / "go").touch()  # now the run goes on
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert "the output's reader has gone; run r goes on" in err
    assert "run finished (submitted) · score exact_match = 1" in err  # the final line, on stderr
    events = read_events(tmp_path / "runs" / "r" / "events.jsonl")
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished) and finished.status == "finished"
    assert any(isinstance(e, ev.EvaluationFinished) and e.ok for e in events)
    assert not any(isinstance(e, ev.Notice) and e.level == "error" for e in events)


def test_replay_resume_fork_and_eval_take_a_run_id_as_mlra_runs_lists_it(tmp_path: Path) -> None:
    """`mlra runs` lists ids; `ctl`, `attach` and `annotate` took one, but `replay`,
    `resume`, `fork` and `eval` answered "ID is not a run folder (no events.jsonl)"."""
    made = mlra_cli(
        ["run", str(ANSWER_TASK), "--model", "baseline", "--no-tui", "--run-id", "r1"],
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    replayed = mlra_cli(["replay", "r1", "--no-tui"], cwd=tmp_path)
    assert replayed.returncode == 0 and replayed.stdout.startswith("▶ answer"), replayed.stderr
    graded = mlra_cli(["eval", "r1"], cwd=tmp_path)
    assert graded.returncode == 0, graded.stderr
    resumed = mlra_cli(["resume", "r1", "--no-tui"], cwd=tmp_path)
    assert resumed.returncode == 2 and "ended with a submission" in resumed.stderr
    forked = mlra_cli(["fork", "r1", "--at", "1", "--no-tui", "--run-id", "f1"], cwd=tmp_path)
    assert forked.returncode == 0, forked.stderr
    assert (tmp_path / "runs" / "f1" / "events.jsonl").is_file()
    missing = mlra_cli(["replay", "r9", "--no-tui"], cwd=tmp_path)
    assert missing.returncode == 2 and "no run 'r9': not a run folder" in missing.stderr


def test_every_command_that_takes_a_run_takes_the_start_of_its_id(tmp_path: Path) -> None:
    """`mlra compare 20261201-020315 ...` took the start of an id; `replay`, `resume`,
    `fork`, `eval`, `ctl`, `attach` and `annotate` said it was not a run folder. One
    lookup now: a start that names one run is that run, one that names several or none
    is refused in one line (exit 2)."""
    made = mlra_cli(
        ["run", str(ANSWER_TASK), "--model", "baseline", "--no-tui", "--run-id", "20261201-a1"],
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    replayed = mlra_cli(["replay", "20261201-a", "--no-tui"], cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    assert "run 20261201-a1" in replayed.stdout.splitlines()[0]
    graded = mlra_cli(["eval", "20261201"], cwd=tmp_path)
    assert graded.returncode == 0, graded.stderr
    resumed = mlra_cli(["resume", "20261201", "--no-tui"], cwd=tmp_path)
    assert resumed.returncode == 2 and "ended with a submission" in resumed.stderr
    attached = mlra_cli(["attach", "20261201"], cwd=tmp_path)
    assert attached.returncode == 2 and "has ended: mlra replay" in attached.stderr
    # `--model replay:RUN` too: found, a baseline run has no model answers to replay.
    found = mlra_cli(["run", str(ANSWER_TASK), "--model", "replay:runs/20261201-a"], cwd=tmp_path)
    assert found.returncode == 2, found.stdout
    assert "the run has no recorded model calls to replay" in found.stderr, found.stderr
    shutil.copytree(tmp_path / "runs" / "20261201-a1", tmp_path / "runs" / "20261201-b2")
    said = "'20261201' is the start of 2 run ids in runs (20261201-a1, 20261201-b2): say more"
    for args in (
        ["replay", "20261201", "--no-tui"],
        ["fork", "20261201", "--at", "1"],
        ["ctl", "20261201", "pause"],
        ["compare", "20261201", "20261201-b", "--no-tui"],
        ["run", str(ANSWER_TASK), "--model", "replay:20261201"],
    ):
        refused = mlra_cli(args, cwd=tmp_path)
        assert refused.returncode == 2, (args, refused.stdout)
        assert refused.stderr.strip().endswith(f"{said} of it"), (args, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1, (args, refused.stderr)
    unknown = mlra_cli(["replay", "20261202", "--no-tui"], cwd=tmp_path)
    assert unknown.returncode == 2 and unknown.stderr.strip() == (
        "mlra: no run '20261202': not a run folder (no events.jsonl), nor a run id (or the "
        "start of one) in runs"
    )
