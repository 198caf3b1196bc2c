"""Batches through the real command line: every task x model x seed run as an
ordinary run, the report's numbers against the runs' own result.json, resuming
after the batch is killed, retries up to the limit, and the report rebuilt from
the run folders alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import log_is_live, read_events
from mlra.batch.report import REPORT_FILES
from mlra.batch.report_rows import mean_se
from mlra.batch.run_ids import run_names
from mlra.batch.spec import BatchError, expand, load_batch_file, run_command
from mlra.console.cli.cli import main
from tests.batch.naming import batch_run_id
from tests.conftest import SECRET_ENV, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn

MODEL = "openai/test-model"


def supervisor_fallback() -> dict[str, Any]:
    """Every supervisor turn: one subtask, then submit; so runs sharing the server need no order."""
    return turn(
        "",
        call("assign_subtask", step_id="1", instructions="Write the answer into answer.txt."),
        call("submit", path="answer.txt", note="done"),
    )


def worker_writing(answer: str) -> dict[str, Any]:
    return turn(
        "Writing.",
        call("bash", command=f"echo {answer} > answer.txt"),
        call("report", summary="done"),
    )


def _batch(
    tmp_path: Path, server: ScriptedModelServer, out: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    args = ["batch", "--tasks", "answer_task", "--models", f"baseline,{MODEL}", *extra]
    args += ["--out", str(out), "--base-url", server.url_for("openai"), "--isolation", "none"]  # type: ignore[list-item]
    return mlra_cli(
        args,
        cwd=tmp_path,
        timeout=180,
    )


@pytest.fixture
def task_link(tmp_path: Path, answer_task: Path) -> Path:
    """The test task under a short name in the batch's working folder."""
    link = tmp_path / "answer_task"
    link.symlink_to(answer_task)
    return link


def test_batch_runs_every_combination_and_reports_the_runs_numbers(
    tmp_path: Path,
    task_link: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # One worker turn per run: whichever run gets the first one answers wrong (score 0).
    script = {
        "supervisor:fallback": supervisor_fallback(),
        "worker": [worker_writing("41")],
        "worker:fallback": worker_writing("42"),
    }
    out = tmp_path / "b"
    with ScriptedModelServer(script) as server:
        proc = _batch(tmp_path, server, out, "--seeds", "2", "--no-tui")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "4/4 finished" in proc.stdout
        # Each run's line says what it scored; the end gives each group's mean ± SE.
        ended = [line for line in proc.stdout.splitlines() if "] finished " in line]
        assert len(ended) == 4 and all(": exact_match = " in line for line in ended), ended
        assert sorted(line.rsplit(" = ", 1)[1] for line in ended) == [
            "0.0000",
            "1.0000",
            "1.0000",
            "1.0000",
        ]
        assert "mean ± standard error over seeds" in proc.stdout
        assert f"  answer · {MODEL}: score 0.5000 ± 0.5000 (unisolated), 2 of 2 seeds scored" in (
            proc.stdout
        )
        assert (
            "  answer · baseline: score 1.0000 ± 0.0000 (unisolated), 2 of 2 seeds scored"
            in proc.stdout
        )

        seeds = {batch_run_id(out, m, s): s for m in ("baseline", MODEL) for s in (1, 2)}
        ids = sorted(p.name for p in (out / "runs").iterdir())
        assert ids == sorted(seeds)
        for run_id in ids:
            started = read_events(out / "runs" / run_id / "events.jsonl")[0]
            assert isinstance(started, ev.RunStarted)
            assert started.config["seed"] == seeds[run_id]
        results = {i: json.loads((out / "runs" / i / "result.json").read_text()) for i in ids}

        report = json.loads((out / "report.json").read_text())
        groups = {(g["task"], g["model"]): g for g in report["groups"]}
        assert set(groups) == {("answer", "baseline"), ("answer", MODEL)}
        for (_task, model), group in groups.items():
            mine = [r for r in results.values() if r["model"] == model]
            scores = [r["score"] for r in mine]
            assert group["runs"] == 2
            assert group["score_mean"] == pytest.approx(sum(scores) / 2)
            assert group["tokens"] == sum(r["tokens"] for r in mine)
            assert group["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in mine))
            assert group["success_rate"] == sum(bool(r["success"]) for r in mine) / 2
        llm = groups[("answer", MODEL)]
        assert sorted(r["score"] for r in results.values() if r["model"] == MODEL) == [0.0, 1.0]
        assert llm["score_mean"] == 0.5 and llm["score_se"] == pytest.approx(0.5)
        assert llm["success_rate"] == 0.5 and llm["tokens"] > 0
        assert groups[("answer", "baseline")]["score_mean"] == 1.0
        md = (out / "report.md").read_text()
        assert (
            f"| answer | {MODEL} | 2 | 2 | 0.5000 ± 0.5000 (unisolated) |" in md
        )  # --isolation none
        for name in REPORT_FILES:
            assert (out / name).stat().st_size > 0, name
        assert (out / "score.png").read_bytes()[:4] == b"\x89PNG"

        # The same command again starts nothing: every run is finished.
        stamps = {i: (out / "runs" / i / "result.json").stat().st_mtime_ns for i in ids}
        asked = len(server.requests)
        again = _batch(tmp_path, server, out, "--seeds", "2", "--no-tui")
        assert again.returncode == 0, again.stderr
        assert "(4 already were; 0 retries)" in again.stdout and "queue " not in again.stdout
        assert len(server.requests) == asked
        assert stamps == {i: (out / "runs" / i / "result.json").stat().st_mtime_ns for i in ids}

    # The report is rebuilt from the run folders alone, with the same numbers.
    for name in REPORT_FILES:
        (out / name).unlink()
    (out / "batch.json").unlink()
    (out / "logs").rename(tmp_path / "logs-elsewhere")
    rebuilt = mlra_cli(["report", str(out)], cwd=tmp_path, timeout=60)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads((out / "report.json").read_text()) == report
    assert (out / "report.md").read_text() == md
    assert f"| answer | {MODEL} |" in rebuilt.stdout
    csv_rows = (out / "report.csv").read_text().splitlines()
    assert csv_rows[0].startswith("task,model,runs,scored,score_mean,score_se")
    assert any(row.startswith(f"answer,{MODEL},2,2,0.5,0.5,") for row in csv_rows)
    assert (out / "normalized.png").read_bytes()[:4] == b"\x89PNG"

    # Without matplotlib (the quick start installs mlra without the batch extra): the
    # tables all the same, and a line on how to get the plots, not a traceback.
    for name in REPORT_FILES:
        (out / name).unlink()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr()
    assert f"| answer | {MODEL} |" in printed.out and (out / "report.md").read_text() == md
    assert (
        printed.err
        == "note: no plots: matplotlib is not installed (pip install 'mlra[batch]' adds it); the tables are written\n"
    )
    assert not (out / "score.png").exists() and (out / "report.csv").exists()


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _hanging_tool_call(run_dir: Path) -> bool:
    log = run_dir / "events.jsonl"
    if not log.is_file():
        return False
    return any(
        isinstance(e, ev.ToolCall) and "sleep" in json.dumps(e.arguments) for e in read_events(log)
    )


HANGING = {
    "supervisor:fallback": supervisor_fallback(),
    "worker:fallback": turn("Waiting.", call("bash", command="sleep 20", timeout=60)),
}
"""A model whose worker runs a long command: a batch of it is stopped midway."""


def _terminal_sigint() -> None:
    """In the child: SIGINT as from a terminal, whatever this process's own. In a `.ci/run`
    the batch ignored the test's Ctrl-C and ran on to its end: an inherited SIG_IGN (which
    Python keeps) or a blocked SIGINT (tests/batch/test_ray_cluster.py starts its driver
    with the default too)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _batch_args(tmp_path: Path, server: ScriptedModelServer, *flags: str) -> list[str]:
    """`mlra batch` of the answer task with the baseline and the server's model, into
    `tmp_path/b`."""
    args = ["batch", "--tasks", "answer_task", "--models", f"baseline,{MODEL}"]
    args += ["--seeds", "1", "--out", str(tmp_path / "b"), "--base-url", server.url_for("openai")]  # type: ignore[list-item]
    return [*args, "--isolation", "none", *flags, "--no-tui"]


def _hanging_batch(
    tmp_path: Path, server: ScriptedModelServer, *flags: str, **popen: Any
) -> subprocess.Popen[Any]:
    """That batch with the `HANGING` model as the server's, started in the background."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    args = _batch_args(tmp_path, server, *flags)
    return subprocess.Popen(
        [sys.executable, "-m", "mlra", *args],
        cwd=tmp_path,
        env=env,
        preexec_fn=_terminal_sigint,
        **popen,
    )


def test_a_killed_batch_rerun_resumes_its_runs_and_retries_failures_up_to_the_limit(
    tmp_path: Path, task_link: Path
) -> None:
    out = tmp_path / "b"
    with ScriptedModelServer(HANGING) as server:
        batch = _hanging_batch(
            tmp_path, server, "--max-attempts", "2",
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        llm_run = out / "runs" / batch_run_id(out, MODEL)
        baseline_result = out / "runs" / batch_run_id(out, "baseline") / "result.json"
        try:
            _wait_for(lambda: baseline_result.exists(), 60, "the baseline run")
            _wait_for(lambda: _hanging_tool_call(llm_run), 60, "the model run's long command")
        finally:
            batch.send_signal(signal.SIGKILL)
            batch.wait()
        # The batch's runs die with it, mid-run: no run_finished, the log's lock free.
        _wait_for(lambda: not log_is_live(llm_run / "events.jsonl"), 30, "the run to die")
        assert not any(isinstance(e, ev.RunFinished) for e in read_events(llm_run / "events.jsonl"))
        baseline_stamp = baseline_result.stat().st_mtime_ns

        # Rerun: the finished run is skipped, the interrupted one is carried on to its end.
        server.set_fallback("worker", worker_writing("42"))
        args = _batch_args(tmp_path, server, "--max-attempts", "2")
        proc = mlra_cli(args, cwd=tmp_path, timeout=180)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        # What this batch did is said: one run resumed (before, nothing told it from a
        # run that went through in one go, there or in the report).
        assert "2/2 finished (1 already were; 1 resumed; 0 retries)" in proc.stdout
        assert baseline_result.stat().st_mtime_ns == baseline_stamp
        assert json.loads((llm_run / "result.json").read_text())["score"] == 1.0
        resumed = any(isinstance(e, ev.RunResumed) for e in read_events(llm_run / "events.jsonl"))
        assert resumed
        rows = json.loads((out / "report.json").read_text())["runs"]
        assert {r["run_id"]: r["resumed"] for r in rows} == {
            llm_run.name: 1,
            baseline_result.parent.name: 0,
        }
        assert f"Resumed: {llm_run.name} (attempt 1, 1 time)" in (out / "report.md").read_text()

        # A run that fails every time is retried until it has used its attempts, then reported.
        server.set_fallback("supervisor", {"status": 400, "message": "bad request"})
        failing = ["batch", "--tasks", "answer_task", "--models", MODEL, "--seeds", "1"]
        failing += ["--out", str(tmp_path / "f"), "--base-url", server.url_for("openai")]  # type: ignore[list-item]
        failing += ["--isolation", "none", "--max-attempts", "2", "--no-tui"]
        proc = mlra_cli(failing, cwd=tmp_path, timeout=180)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        # A provider that fails says nothing about the agent: the run is retried.
        f = tmp_path / "f"
        failed = batch_run_id(f, MODEL)
        assert f"not done: {failed} (failed, provider_error, 2 attempts)" in proc.stdout
        assert "1 retry)" in proc.stdout
        assert [p.name for p in (f / "retired").iterdir()] == [f"{failed}__a1"]
        report = json.loads((f / "report.json").read_text())
        assert report["groups"][0]["failures"] == {"provider_error": 1}
        assert report["groups"][0]["success_rate"] is None  # none scored, not 0%
        # Both attempts are rows; the group counts the first, and the retry is counted.
        assert [(r["attempt"], r["counted"]) for r in report["runs"]] == [(1, True), (2, False)]
        assert report["groups"][0]["runs"] == 1 and report["groups"][0]["retries"] == 1
        # Its attempts are used up: running the batch again does not start it again.
        asked = len(server.requests)
        proc = mlra_cli(failing, cwd=tmp_path, timeout=60)
        assert proc.returncode == 1 and len(server.requests) == asked


def test_a_batch_with_agent_worker_runs_each_run_with_the_worker_alone(
    tmp_path: Path, task_link: Path
) -> None:
    solve = [
        turn("I will write the answer.", call("bash", command="echo 42 > answer.txt")),
        turn("", call("submit", path="answer.txt", note="42")),
    ]
    out = tmp_path / "b"
    with ScriptedModelServer({"worker": solve}) as server:
        args = ["batch", "--tasks", "answer_task", "--models", MODEL, "--agent", "worker"]
        args += ["--out", str(out), "--base-url", server.url_for("openai"), "--isolation", "none"]
        proc = mlra_cli([*args, "--log-budget", "2g", "--no-tui"], cwd=tmp_path, timeout=180)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert server.requests_for("supervisor") == []
    (run_dir,) = (out / "runs").iterdir()
    # Each run has the batch's log budget.
    started = read_events(run_dir / "events.jsonl")[0]
    assert isinstance(started, ev.RunStarted) and started.config["log_budget_mb"] == 2048
    result = json.loads((run_dir / "result.json").read_text())
    assert result["score"] == 1.0 and result["worker_alone"] == "chosen"
    # The report tells the worker's runs from supervised ones.
    assert f"answer · {MODEL}: score 1.0000 (unisolated), 1 of 1 seed scored" in proc.stdout
    assert "success 100% · worker alone\n" in proc.stdout, proc.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["groups"][0]["worker_alone"] == 1
    assert report["runs"][0]["worker_alone"] == "chosen"
    assert "Worker alone: answer · " in (out / "report.md").read_text()
    listed = mlra_cli(["runs", "--runs-dir", str(out / "runs")], cwd=tmp_path)
    assert f"{MODEL} (worker alone)" in listed.stdout
    # The batch folder itself, as report, compare and export take it (it said "no runs").
    listed_too = mlra_cli(["runs", "--runs-dir", str(out)], cwd=tmp_path)
    assert listed_too.returncode == 0 and listed_too.stdout == listed.stdout
    # Where a run of it could not start, the batch says so once, before any run.
    for extra, said in (
        (["--models", f"baseline,{MODEL}"], "agent worker (--agent, or `agent` in the batch"),
        (["--models", MODEL, "--search", "greedy"], "do not go together"),
    ):
        proc = mlra_cli(
            ["batch", "--tasks", "answer_task", "--agent", "worker", "--out", str(tmp_path / "x"),
             "--base-url", "http://127.0.0.1:9/v1", *extra],
            cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()


def test_bad_batch_input_is_one_line_and_exit_2(tmp_path: Path, task_link: Path) -> None:
    proc = mlra_cli(["batch", "--tasks", "no-such-task", "--models", "baseline"], cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "no-such-task" in proc.stderr and not (tmp_path / "batches").exists()
    proc = mlra_cli(["batch", "--tasks", "answer_task", "--models", "anthropic/x"], cwd=tmp_path)
    assert proc.returncode == 2 and "ANTHROPIC_API_KEY" in proc.stderr
    proc = mlra_cli(["batch", "--tasks", "answer_task"], cwd=tmp_path)
    assert proc.returncode == 2 and "name the models" in proc.stderr
    # A log budget that is no size, as a flag or in the batch file.
    proc = mlra_cli([*["batch", "--tasks", "answer_task", "--models", "baseline"], "--log-budget", "lots"], cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "--log-budget: 'lots' is not a size" in proc.stderr
    (tmp_path / "budget.toml").write_text(
        'tasks = ["answer_task"]\nmodels = ["baseline"]\nout = "s"\nlog_budget = "lots"\n'
    )
    proc = mlra_cli(["batch", "budget.toml"], cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "budget.toml: log_budget: 'lots' is not a size" in proc.stderr, proc.stderr
    proc = mlra_cli(["report", str(tmp_path / "nothing")], cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    # Search settings no run could start with are refused before any run, not each run
    # after the batch began (exit 1, "failed (usage)" once per run).
    (tmp_path / "attempts.toml").write_text(
        'tasks = ["answer_task"]\nmodels = ["baseline"]\nout = "s"\n'
        "[overrides.answer_task]\nattempts = 2\n"
    )
    proc = mlra_cli(["batch", "attempts.toml"], cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "batch: answer · baseline: --attempts and --attempts-parallel go with" in proc.stderr
    assert proc.stdout == "" and not (tmp_path / "s").exists()
    search = ["batch", "--tasks", "answer_task", "--models", "baseline", "--search"]
    proc = mlra_cli([*search, "llm", "--out", "s"], cwd=tmp_path)
    assert proc.returncode == 2 and "--search llm needs a model" in proc.stderr
    proc = mlra_cli([*search, "greedy", "--out", "s"], cwd=tmp_path)  # no recipe variants
    assert proc.returncode == 2 and "declares no recipe variants" in proc.stderr, proc.stderr
    assert not (tmp_path / "s").exists()


def test_a_batch_file_with_per_task_overrides(
    tmp_path: Path, task_link: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "batch.toml").write_text(
        'tasks = ["answer_task"]\nmodels = ["baseline", "openai/m"]\nseeds = 3\nout = "b"\n'
        'base_url = "http://127.0.0.1:9/v1"\nlog_budget = 64\n'
        '[overrides.answer_task]\nmax_steps = 7\ntime_limit = "2m"\ngpus = 1\nmemory_gb = 2\n'
        'agent = "worker"\n'
    )
    monkeypatch.chdir(tmp_path)
    spec = load_batch_file(tmp_path / "batch.toml")
    runs = expand(spec, run_names(spec.out_dir()))
    assert len(runs) == 6 and spec.out_dir() == tmp_path / "b"
    assert runs[0].resources.gpus == 1 and runs[0].resources.memory_gb == 2
    command = run_command(runs[-1], spec, tmp_path / "b" / "runs", python="python")
    assert command[command.index("--max-steps") + 1] == "7"
    assert command[command.index("--agent") + 1] == "worker"
    assert command[command.index("--log-budget") + 1] == "64m"  # a number is in MB
    assert command[command.index("--run-id") + 1] == batch_run_id(tmp_path / "b", "openai/m", 3)
    assert command[command.index("--run-id") + 1].startswith("answer__openai-m__s3-")
    assert "--base-url" in command
    assert "--base-url" not in run_command(runs[0], spec, tmp_path, python="python")

    (tmp_path / "bad.toml").write_text(
        'tasks = ["answer_task"]\nmodels = ["baseline"]\nseeds = 0\n'
    )
    with pytest.raises(BatchError, match="seeds"):
        load_batch_file(tmp_path / "bad.toml")


def test_mean_and_standard_error() -> None:
    assert mean_se([]) == (None, None)
    assert mean_se([0.7]) == (0.7, None)
    mean, se = mean_se([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and se == pytest.approx(1.2909944 / 2)


async def test_the_local_pool_holds_runs_to_capacity_and_gives_each_its_own_gpu(
    tmp_path: Path, answer_task: Path
) -> None:
    from mlra.batch.executors.local import Capacity, LocalExecutor
    from mlra.batch.runner import BatchRunner
    from mlra.batch.spec import BatchSpec, Overrides

    out = tmp_path / "b"
    spec = BatchSpec(
        tasks=[str(answer_task)],
        models=["baseline"],
        seeds=3,
        out=out,
        isolation="none",
        overrides={str(answer_task): Overrides(gpus=1)},
    )
    # Two GPUs (by name; no device is touched by the answer task) and CPUs to spare.
    executor = LocalExecutor(Capacity(cpus=8, memory_gb=64, gpus=["0", "1"]))
    progress = await BatchRunner(spec, expand(spec, run_names(out)), executor, out).run()
    assert progress.count("finished") == 3

    spans = []
    for run_dir in sorted((out / "runs").iterdir()):
        events = read_events(run_dir / "events.jsonl")
        assert isinstance(events[0], ev.RunStarted)
        spans.append((events[0].config["gpus"], events[0].ts, events[-1].ts))
    assert sorted(g for g, _, _ in spans) in (["0", "0", "1"], ["0", "1", "1"])
    for i, (gpu, start, end) in enumerate(spans):
        for other_gpu, other_start, other_end in spans[i + 1 :]:
            if gpu == other_gpu:  # one GPU, one run at a time
                assert end <= other_start or other_end <= start

    # A run that can never fit is reported, not started.
    big = spec.model_copy(
        update={"out": tmp_path / "big", "overrides": {str(answer_task): Overrides(gpus=3)}}
    )
    big_out = tmp_path / "big"
    progress = await BatchRunner(big, expand(big, run_names(big_out)), executor, big_out).run()
    assert {s.reason for s in progress.statuses.values()} == {"resources"}
    refused = batch_run_id(big_out, "baseline")
    assert "needs 3 GPU(s); this machine has 2" in progress.statuses[refused].detail
    assert not (big_out / "runs" / refused).exists()


def test_ctrl_c_says_what_the_batch_leaves_and_writes_the_report(
    tmp_path: Path, task_link: Path
) -> None:
    """Ctrl-C stops the runs (each records its stop) and the batch says what it leaves and
    how to carry on, with the report so far: it printed a bare "mlra: interrupted"."""
    out = tmp_path / "b"
    with ScriptedModelServer(HANGING) as server:
        batch = _hanging_batch(
            tmp_path, server, "--parallel", "1",
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        runs = out / "runs"
        try:
            _wait_for(lambda: runs.is_dir() and any(runs.iterdir()), 60, "the first run")
            first = next(runs.iterdir())
            if "baseline" in first.name:  # the model run is the one to stop midway
                _wait_for(lambda: len(list(runs.iterdir())) == 2, 60, "the model run")
            llm_run = runs / batch_run_id(out, MODEL)
            _wait_for(lambda: _hanging_tool_call(llm_run), 60, "the model run's long command")
            batch.send_signal(signal.SIGINT)
            stdout, stderr = batch.communicate(timeout=120)  # each run has 30 s to stop
        finally:
            if batch.poll() is None:
                batch.kill()
                batch.wait()
    assert batch.returncode == 130, stdout + stderr
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("batch: stopped (Ctrl-C): 1 run stopped midway"), stdout
    assert "the same command carries it on" in last and str(out / "report.md") in last
    assert (out / "report.md").is_file()


async def test_a_resumed_batch_counts_only_its_runs_left_as_sharing_the_machine(
    tmp_path: Path, answer_task: Path
) -> None:
    """A batch rerun with one run left to do runs it alone: counted with the runs
    already finished, it was told it shared the machine (1/K of the disk, its baseline
    left out of the measured baseline)."""
    from mlra.batch.executors.local import Capacity, LocalExecutor
    from mlra.batch.runner import BatchRunner
    from mlra.batch.spec import BatchSpec

    out = tmp_path / "b"
    executor = LocalExecutor(Capacity(cpus=8, memory_gb=64, gpus=[]))

    def runner(seeds: int) -> BatchRunner:
        spec = BatchSpec(
            tasks=[str(answer_task)], models=["baseline"], seeds=seeds, out=out, isolation="none"
        )
        return BatchRunner(spec, expand(spec, run_names(out)), executor, out)

    assert (await runner(1).run()).count("finished") == 1
    again = runner(2)
    assert len(again.runs) == 2
    assert again.shared_by == 1  # the one run left
    assert runner(3).shared_by == 2
