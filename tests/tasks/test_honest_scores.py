"""Honest scores: result.json is bound to the log it came from, and a score earned
without isolation is marked wherever it is shown (`mlra runs`, the last line of a
headless run, batch reports)."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog
from mlra.agent.record.run_result import RunResult, write_result
from mlra.agent.record.state import RunState
from mlra.agent.run.resume import ResumeError, load_run
from mlra.batch.report import write_report
from mlra.console.apps.headless_run import final_line
from mlra.console.cli.cli import main
from tests.conftest import BaselineRun, mlra_cli


def _run(
    runs: Path, name: str, *, isolation: str = "bwrap", score: float = 0.5, model: str = "m"
) -> Path:
    """A finished, scored run folder, written as the controller writes one."""
    run_dir = runs / name
    log = EventLog(run_dir / EVENTS_FILE)
    state = RunState()
    log.subscribe(state.apply)
    sandbox = ev.SandboxInfo(
        kind="local", isolation=isolation, network=False, workdir="/w", workspace="/w"
    )
    limits = ev.Limits(time_limit_s=60)
    log.append(
        ev.RunStarted(
            run_id=name, task="answer", task_title="A", model=model, limits=limits, sandbox=sandbox
        )
    )
    log.append(ev.Submission(path="answer.txt"))
    log.append(ev.EvaluationFinished(ok=True, metric="exact_match", score=score, normalized=score))
    log.append(ev.RunFinished(status="finished", reason="submitted"))
    log.close()
    write_result(state, run_dir)
    return run_dir


def _rows(runs: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, object]]:
    assert main(["runs", "--runs-dir", str(runs), "--json"]) == 0
    return {r["id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}


def test_result_json_names_its_log_and_the_isolation_the_run_had(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, "r", isolation="none")
    result = json.loads((run_dir / "result.json").read_text())
    log = (run_dir / EVENTS_FILE).read_bytes()
    assert result["log_sha256"] == hashlib.sha256(log).hexdigest()
    assert result["log_size"] == len(log)
    assert result["isolation"] == "none" and result["score"] == 0.5


def test_runs_tells_a_result_that_no_longer_matches_its_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    _run(runs, "a-honest")

    edited = _run(runs, "b-score-edited")
    result = json.loads((edited / "result.json").read_text())
    result["score"] = result["normalized_score"] = 0.99
    (edited / "result.json").write_text(json.dumps(result))

    relabelled = _run(runs, "c-isolation-edited", isolation="none")
    result = json.loads((relabelled / "result.json").read_text())
    result["isolation"] = "bwrap"
    (relabelled / "result.json").write_text(json.dumps(result))

    # The log rewritten under its result, numbering kept: the score line says otherwise.
    rewritten = _run(runs, "d-log-rewritten")
    log = rewritten / EVENTS_FILE
    log.write_bytes(log.read_bytes().replace(b'"score":0.5', b'"score":0.25'))

    # A log appended to since (resumed, then killed): the result is stale, not false.
    resumed = _run(runs, "e-resumed")
    more = EventLog(resumed / EVENTS_FILE, start_seq=4)
    more.append(ev.RunResumed())
    more.close()

    rows = _rows(runs, capsys)
    assert rows["a-honest"]["status"] == "finished" and not rows["a-honest"]["result_mismatch"]
    assert rows["a-honest"]["score"] == 0.5

    assert rows["b-score-edited"]["result_mismatch"]
    assert rows["b-score-edited"]["score"] == 0.5  # what the log says
    assert "score 0.99" in str(rows["b-score-edited"]["problem"])

    assert rows["c-isolation-edited"]["result_mismatch"]
    assert rows["c-isolation-edited"]["isolation"] == "none"
    assert rows["c-isolation-edited"]["unisolated"]

    assert rows["d-log-rewritten"]["result_mismatch"]
    assert rows["d-log-rewritten"]["score"] == 0.25

    assert not rows["e-resumed"]["result_mismatch"]
    assert rows["e-resumed"]["status"] == "interrupted"

    assert main(["runs", "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr()
    status = {line.split()[0]: line.split()[3] for line in out.out.splitlines()[1:]}
    assert status == {
        "a-honest": "finished",
        "b-score-edited": "result≠log",
        "c-isolation-edited": "result≠log",
        "d-log-rewritten": "result≠log",
        "e-resumed": "interrupted",
    }
    assert "b-score-edited: result≠log: result.json says score 0.99" in out.err


def test_runs_lists_a_damaged_log_as_damaged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    for name in ("gap", "forged"):
        run_dir = _run(runs, name)
        lines = (run_dir / EVENTS_FILE).read_bytes().splitlines(keepends=True)
        if name == "gap":
            del lines[2]  # the evaluation, say
        else:
            lines[1] = b'{"v":1,"seq":2,"type":"submission","path":"other.txt","by":"human"}\n'
        (run_dir / EVENTS_FILE).write_bytes(b"".join(lines))
        (run_dir / "result.json").unlink()  # no result to go by: the log alone
    rows = _rows(runs, capsys)
    assert rows["gap"]["status"] == "damaged"
    assert f"{runs / 'gap' / EVENTS_FILE}:3: seq 4 where 3 was due" in str(rows["gap"]["problem"])
    assert rows["forged"]["status"] == "damaged"
    assert ":2: not a valid event" in str(rows["forged"]["problem"])


def test_runs_marks_unisolated_scores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    _run(runs, "a-bwrap", isolation="bwrap")
    _run(runs, "b-none", isolation="none")
    assert main(["runs", "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr()
    header, *lines = out.out.splitlines()
    assert "isol." in header.split()
    cells = {line.split()[0]: line.split() for line in lines}
    assert cells["a-bwrap"][4:7] == ["submitted", "0.5", "+0.500"] and "bwrap" in cells["a-bwrap"]
    assert cells["b-none"][4:7] == ["submitted", "0.5*", "+0.500*"] and "none" in cells["b-none"]
    assert "* unisolated: scored with sandbox isolation none" in out.err


def test_the_last_line_of_a_headless_run_marks_an_unisolated_score(tmp_path: Path) -> None:
    base = RunResult.model_validate_json((_run(tmp_path, "r") / "result.json").read_bytes())
    isolated = final_line(tmp_path / "r", base)
    assert "score exact_match = 0.5" in isolated and "isolation bwrap" in isolated
    assert "unisolated" not in isolated
    bare = final_line(tmp_path / "r", base.model_copy(update={"isolation": "none"}))
    assert "score exact_match = 0.5 (normalized +0.500) · unisolated" in bare


def test_batch_reports_show_isolation_and_mark_unisolated_scores(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _run(runs, "a1", isolation="bwrap", model="alpha")
    _run(runs, "a2", isolation="bwrap", model="alpha")
    _run(runs, "b1", isolation="none", model="beta")
    _run(runs, "c1", isolation="none", model="gamma")
    _run(runs, "c2", isolation="bwrap", model="gamma")
    write_report(tmp_path, plots=False)

    md = (tmp_path / "report.md").read_text().splitlines()
    row = {line.split(" | ")[1]: line for line in md if line.startswith("| answer |")}
    assert "unisolated" not in row["alpha"] and row["alpha"].endswith("| bwrap |")
    assert "| 0.5000 (unisolated) | +0.500 (unisolated) |" in row["beta"]
    assert row["beta"].endswith("| none |")
    assert "(1 of 2 unisolated)" in row["gamma"] and row["gamma"].endswith("| bwrap, none |")

    with open(tmp_path / "report.csv", encoding="utf-8") as f:
        groups = {g["model"]: g for g in csv.DictReader(f)}
    assert (groups["alpha"]["isolation"], groups["alpha"]["unisolated"]) == ("bwrap", "0")
    assert (groups["beta"]["isolation"], groups["beta"]["unisolated"]) == ("none", "1")
    assert (groups["gamma"]["isolation"], groups["gamma"]["unisolated"]) == ("bwrap;none", "1")

    report = json.loads((tmp_path / "report.json").read_text())
    by_run = {r["run_id"]: r for r in report["runs"]}
    assert by_run["b1"]["isolation"] == "none" and by_run["b1"]["unisolated"]
    assert by_run["a1"]["isolation"] == "bwrap" and not by_run["a1"]["unisolated"]


def test_resume_refuses_a_damaged_log(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, "r")
    lines = (run_dir / EVENTS_FILE).read_bytes().splitlines(keepends=True)
    (run_dir / EVENTS_FILE).write_bytes(b"".join([lines[0], *lines[2:]]))
    with pytest.raises(ResumeError, match=r"damaged.*events\.jsonl:2: seq 3 where 2 was due"):
        load_run(run_dir)


def test_mlra_eval_binds_the_new_result_to_the_grown_log(
    answer_baseline_run: BaselineRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc, run_dir = answer_baseline_run
    runs = run_dir.parent
    isolation = json.loads((run_dir / "result.json").read_text())["isolation"]
    assert isolation in ("bwrap", "none")
    assert f"isolation {isolation}" in proc.stdout or "unisolated" in proc.stdout
    before = (run_dir / EVENTS_FILE).read_bytes()

    again = mlra_cli(["eval", str(run_dir)], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    log = (run_dir / EVENTS_FILE).read_bytes()
    assert len(log) > len(before)
    result = json.loads((run_dir / "result.json").read_text())
    assert result["log_sha256"] == hashlib.sha256(log).hexdigest()
    row = _rows(runs, capsys)[run_dir.name]
    assert row["status"] == "finished" and not row["result_mismatch"]


@pytest.mark.parametrize(
    ("first", "then", "shown"),
    [("bwrap", "none", "none"), ("none", "bwrap", "none"), ("bwrap", "docker", "docker")],
)
def test_a_resumed_run_is_unisolated_if_any_part_of_it_was(
    first: str, then: str, shown: str
) -> None:
    """A run resumed with another isolation: work done unconfined is in its result."""

    def sandbox(isolation: str) -> ev.SandboxInfo:
        return ev.SandboxInfo(
            kind="local", isolation=isolation, network=False, workdir="/w", workspace="/w"
        )

    state = RunState()
    limits = ev.Limits(time_limit_s=60)
    state.apply(
        ev.RunStarted(
            run_id="r", task="answer", task_title="A", model="m", limits=limits,
            sandbox=sandbox(first),
        )
    )  # fmt: skip
    state.apply(ev.RunFinished(status="stopped", reason="stopped"))
    state.apply(ev.RunResumed(sandbox=sandbox(then)))
    assert state.sandbox is not None and state.sandbox.isolation == shown
