"""A batch's search settings reach each run as `mlra run` takes them: `--attempt-min-time`
(a flag, and `attempt_min_time` in the batch file) beside `--search`, `--attempts` and
`--attempts-parallel`; a value no run could start with is one line, exit 2, before any
run starts. Through the real command line."""

from __future__ import annotations

from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.batch.run_ids import run_names
from mlra.batch.spec import expand, load_batch_file, run_command
from tests.agent.test_search import _variant_task
from tests.conftest import mlra_cli


def test_a_batchs_attempt_min_time_is_each_runs_least_time_for_an_attempt(
    tmp_path: Path, answer_task: Path
) -> None:
    """A minute, two attempts one at a time: each attempt's share is 27 s (6 s kept at
    the end), which the run's 30 s default would raise to 30 s; the batch's 45 s is the
    least the run gives its first attempt."""
    task = _variant_task(answer_task, tmp_path)
    out = tmp_path / "b"
    args = ["batch", "--tasks", str(task), "--models", "baseline", "--out", str(out)]
    args += ["--isolation", "none", "--search", "greedy", "--attempts", "2"]
    args += ["--attempts-parallel", "1", "--attempt-min-time", "45s", "--time-limit", "1m"]
    proc = mlra_cli([*args, "--no-tui"], cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = (out / "runs").iterdir()
    events = read_events(run_dir / "events.jsonl")
    (begun,) = [e for e in events if isinstance(e, ev.RunStarted)]
    assert begun.config["attempt_min_s"] == 45.0 and begun.config["attempts"] == 2
    first = next(e for e in events if isinstance(e, ev.AttemptStarted))
    assert first.time_limit_s == 45.0


def test_a_batch_files_attempt_min_time_is_passed_to_each_run(
    tmp_path: Path, answer_task: Path
) -> None:
    (tmp_path / "batch.toml").write_text(
        f'tasks = ["{answer_task}"]\nmodels = ["baseline"]\nout = "b"\n'
        '[defaults]\nsearch = "greedy"\nattempt_min_time = "45s"\n'
    )
    spec = load_batch_file(tmp_path / "batch.toml")
    (run,) = expand(spec, run_names(spec.out_dir()))
    command = run_command(run, spec, tmp_path / "b" / "runs", python="python")
    assert command[command.index("--attempt-min-time") + 1] == "45s"
    assert command[command.index("--search") + 1] == "greedy"


def test_a_bad_attempt_min_time_is_one_line_and_exit_2(tmp_path: Path, answer_task: Path) -> None:
    task = _variant_task(answer_task, tmp_path)
    batch = ["batch", "--tasks", str(task), "--models", "baseline", "--out", "s"]
    for extra, said in (
        (["--search", "greedy", "--attempt-min-time", "0s"], "a duration must be positive"),
        (["--search", "greedy", "--attempt-min-time", "soon"], "'soon' is not a duration"),
        (["--attempt-min-time", "45s"], "--attempt-min-time goes with --search greedy or llm"),
    ):
        proc = mlra_cli([*batch, *extra], cwd=tmp_path)
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    (tmp_path / "bad.toml").write_text(
        f'tasks = ["{task}"]\nmodels = ["baseline"]\nout = "s"\n'
        '[overrides."' + str(task) + '"]\nsearch = "greedy"\nattempt_min_time = "soon"\n'
    )
    proc = mlra_cli(["batch", "bad.toml"], cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "attempt_min_time: 'soon' is not a duration" in proc.stderr
    assert not (tmp_path / "s").exists()
