"""A run's log read while its run was still writing, then locked once it had ended.

`mlra resume` and `mlra eval` read the log, then lock it to write on. A run that was
still ending in between (its stop's last events; a resume started as it ended) wrote
past what was read: going on from the reading numbered the new events as the run's
last ones, and the log read as damaged for good ('a repeated or moved line').
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import EventLog, LogMoved, read_events
from mlra.agent.run.resume import load_run, resume_controller
from mlra.tasks.spec import find_task
from tests.agent.test_resume_held_call import _env, _mlra, _wait_in_log
from tests.conftest import ANSWER_TASK, mlra_cli


def test_a_log_written_after_it_was_read_is_not_locked_as_read(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    for n in range(3):
        log.append(ev.Notice(level="info", message=f"line {n}"))
    read = read_events(path)
    writer = (
        "import sys\n"
        "from pathlib import Path\n"
        "from mlra import events as ev\n"
        "from mlra.agent.record.eventlog import EventLog\n"
        "log = EventLog(Path(sys.argv[1]), start_seq=3)\n"
        "log.append(ev.Notice(level='info', message='written after the reading'))\n"
        "log.close()\n"
    )
    log.close()
    done = subprocess.run([sys.executable, "-c", writer, str(path)], check=False)
    assert done.returncode == 0
    with pytest.raises(LogMoved, match="up to seq 4"):
        EventLog(path, start_seq=read[-1].seq)
    again = EventLog(path, start_seq=4)  # read again: it goes on
    again.append(ev.Notice(level="info", message="after"))
    again.close()
    assert [e.seq for e in read_events(path)] == [1, 2, 3, 4, 5]


def test_a_torn_last_line_is_not_taken_for_a_written_one(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    log.append(ev.Notice(level="info", message="whole"))
    log.close()
    with open(path, "ab") as f:
        f.write(b'{"v":1,"seq":2,"ts":1.0,"t":0.0,"type":"notice","lev')
    EventLog(path, start_seq=1).close()  # what a reading finds: one whole line


def test_a_resume_read_as_its_run_ended_goes_on_from_the_runs_end(tmp_path: Path) -> None:
    """The run is read while it waits at a breakpoint, then quits (its last events written
    after the reading) before the resume locks its log: the resume goes on from the end."""
    runs = tmp_path / "runs"
    run_dir = runs / "r"
    log = run_dir / "events.jsonl"
    args = ["run", str(ANSWER_TASK), "--model", "baseline", "--no-tui", "--runs-dir", str(runs)]
    args += ["--run-id", "r", "--isolation", "none", "--break", "bash"]
    with _mlra(args, tmp_path, _env()) as proc:
        _wait_in_log(proc, log, "the call waiting", lambda e: isinstance(e, ev.ApprovalRequested))
        run = load_run(run_dir)  # the run is live: its end is not in this reading

        def run_ends_meanwhile() -> None:
            done = mlra_cli(["ctl", str(run_dir), "quit"], cwd=tmp_path, env=_env())
            assert done.returncode == 0, done.stdout + done.stderr
            assert proc.wait(timeout=120) is not None

        assert not any(isinstance(e, ev.RunFinished) for e in run.events)
        controller = resume_controller(
            run, find_task(str(ANSWER_TASK)), None, overrides={"model": "baseline"},
            ready=run_ends_meanwhile,
        )  # fmt: skip
    assert controller.log is not None
    try:
        written = read_events(log)
        assert isinstance(written[-1], ev.RunFinished)  # the run's own end, after the reading
        assert run.events == written  # what the resume goes on from (and the CLI says)
        controller.log.append(ev.Notice(level="info", message="the resume's first"))
    finally:
        controller.log.close()
    assert [e.seq for e in read_events(log)] == list(range(1, len(written) + 2))
