"""The headless transcript names the run it shows (a fork as the fork) and every event a
person should see: jobs, retries, what an edit ran."""

from __future__ import annotations

import io
from pathlib import Path

from mlra import events as ev
from mlra.agent.run.resume import fork_run, load_run
from mlra.console.text.headless import TranscriptDisplay
from mlra.tasks.spec import load_task
from tests.conftest import BaselineRun, mlra_cli


def transcript(events: list[ev.Event], *, ahead: Path | None = None) -> str:
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    if ahead is not None:
        display.read_ahead(events, ahead)
    for event in events:
        display.on_event(event)
    return out.getvalue()


def test_a_fork_replayed_headless_names_the_fork(
    answer_baseline_run: BaselineRun, answer_task: Path, tmp_path: Path
) -> None:
    source = load_run(answer_baseline_run.run_dir)
    fork_dir = tmp_path / "runs" / "the-fork"
    fork_run(source, load_task(answer_task), at_step=1, run_dir=fork_dir, model="baseline")
    proc = mlra_cli(["replay", str(fork_dir), "--no-tui"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    header = proc.stdout.splitlines()[:2]
    assert f"run the-fork (a fork of {source.started.run_id} at worker step 1)" in header[0]
    assert f"workspace {fork_dir / 'workspace'}" in header[1], header
    assert str(answer_baseline_run.run_dir) not in "\n".join(header)
    assert f"⑂ this is run the-fork, forked from {source.started.run_id} at worker step 1" in (
        proc.stdout
    )


def test_the_headless_transcript_shows_jobs_retries_and_what_an_edit_ran() -> None:
    command = {"command": "echo 42 > answer.txt"}
    edited = {"command": "echo 41 > answer.txt"}
    text = transcript(
        [
            ev.JobStarted(
                job="job-1", name="train", command="python train.py", log="job-1.log", t=1
            ),
            ev.ModelRetry(agent="worker", model="m", attempt=2, max_retries=5, status=429, t=2),
            ev.ModelRetry(agent="worker", model="m", attempt=3, t=3),
            ev.ToolCall(call_id="c1", agent="worker", tool="bash", arguments=command, t=4),
            ev.ApprovalRequested(call_id="c1", tool="bash", arguments=command, reason="bash", t=4),
            ev.Control(action="edit", call_id="c1", arguments=edited, t=5),
            ev.JobEnded(job="job-1", end="exited", exit_code=0, duration_s=213, t=214),
            ev.JobEnded(job="job-2", end="stopped", reason="the time limit was reached", t=215),
        ]
    )
    assert "job job-1 (train) started: $ python train.py · log job-1.log" in text
    assert "worker model retry 2/5 after 429" in text
    assert "worker model retry 3 after a failed connection" in text
    assert "user edit, runs: $ echo 41 > answer.txt" in text
    # A headless run held at a breakpoint says how a shell decides the call.
    assert (
        "? waiting for approval of bash (breakpoint: bash): "
        "mlra ctl RUN approve, edit JSON or reject MESSAGE decides it"
    ) in text
    assert "job job-1 exited 0 after 3m33s" in text
    assert "job job-2 stopped after 0s: the time limit was reached" in text


def test_the_attempt_tools_are_said_in_words_not_json() -> None:
    from mlra.console.text.event_lines import describe_call

    start = {"operator": "improve", "parent": "a3", "instructions": "lower the lr to 0.003"}
    assert describe_call("attempt_start", start) == (
        "attempt_start improve from a3: lower the lr to 0.003"
    )
    assert describe_call("attempt_stop", {"attempt": "a2"}) == "attempt_stop a2"


def test_a_resumed_local_run_prints_each_call_s_speed_and_a_server_wait() -> None:
    """`mlra resume --no-tui` of a run on the user's own server: its printer sees no
    run_started, so the config tells it to time the calls (issue 40); a wait for a server
    that went away says why and that the clock is paused."""
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False, heartbeat_s=None)
    display.time_calls(True)
    call = ev.ModelCall(
        agent="worker",
        model="openai/local",
        input_tokens=900,
        output_tokens=120,
        latency_s=6.0,
        first_token_s=2.0,
        t=30.0,
    )
    wait = ev.ModelRetry(
        agent="worker", model="openai/local", attempt=2, cause="not_answering", wait_s=2.0, t=40.0
    )
    display.on_event(call)
    display.on_event(wait)
    shown = out.getvalue()
    assert "worker answered in 6.0s" in shown and "tok/s" in shown
    assert "retry 2 after the server is not answering; waiting 2s, clock paused" in shown


def test_a_notice_is_stamped_with_the_run_clock_as_in_the_console() -> None:
    text = transcript(
        [ev.Notice(level="warning", message="worker's answer could not be read", t=127)]
    )
    assert text.strip() == "[2m07s] ! worker's answer could not be read"


def test_a_headless_run_s_own_pauses_say_how_to_go_on(tmp_path: Path) -> None:
    """`--paused`, then `mlra ctl RUN step`: the run's own pauses are said as the console
    says them, with the commands that go on. They printed as "start pause", "step pause"."""
    import os
    import subprocess
    import sys
    import time

    from mlra.control_socket import socket_path
    from tests.conftest import ANSWER_TASK, SECRET_ENV

    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    run_dir = tmp_path / "runs" / "b"
    args = ["run", str(ANSWER_TASK), "--model", "baseline", "--no-tui", "--paused"]
    args += ["--isolation", "none", "--runs-dir", str(tmp_path / "runs"), "--run-id", "b"]
    out = tmp_path / "out.txt"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlra", *args], cwd=tmp_path, env=env, stdout=sink
        )
    try:
        deadline = time.monotonic() + 120
        log = run_dir / "events.jsonl"
        # Another process writes them: poll for its socket and its start.
        while not socket_path(run_dir).exists() or b"plan_updated" not in (
            log.read_bytes() if log.exists() else b""
        ):
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.02)
        stepped = mlra_cli(["ctl", str(run_dir), "step"], cwd=tmp_path, env=env)
        assert stepped.returncode == 0, stepped.stderr
        while b'"source":"step"' not in log.read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.02)
        assert mlra_cli(["ctl", str(run_dir), "resume"], cwd=tmp_path, env=env).returncode == 0
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = out.read_text()
    assert "start pause" not in text and "step pause" not in text, text
    assert (
        f"paused before the first action (--paused): mlra ctl {run_dir} step runs one, "
        f"mlra ctl {run_dir} resume goes on"
    ) in text
    assert f"paused after one action: mlra ctl {run_dir} step runs the next" in text


def test_a_progress_bar_in_a_result_is_its_last_state_as_in_the_console() -> None:
    """Each redraw of a tqdm bar was a line of its own in the result's last lines, the
    bar's last state among its earlier ones; the console and the shared page show the
    last state only (mlra/terminal_text.py as_drawn)."""
    bar = "".join(f"\rWriting model shards: {p}%|" for p in (0, 25, 50, 75, 100))
    text = transcript(
        [
            ev.ToolCall(call_id="c1", agent="worker", tool="bash", arguments={"command": "x"}),
            ev.ToolResult(
                call_id="c1", tool="bash", agent="worker", ok=True, output=f"valid 4.5\n{bar}\n"
            ),
        ]
    )
    shown = [line.strip() for line in text.splitlines() if "│" in line]
    assert shown == ["│ valid 4.5", "│ Writing model shards: 100%|"]


LISTING = (
    "[.: 5 entries, depth 2]\ndata/\n  train.txt  2.1 MiB\n  valid.txt  199.6 KiB\n"
    "README.md  2.4 KiB\ntrain.py  8.0 KiB"
)
READ = "[README.md: lines 1-3 of 3]\n     1\t# tiny-lm\n     2\t\n     3\t  indented"


def _whole_results() -> list[ev.Event]:
    """A listing and a file read: results that come whole, with no output streamed."""
    return [
        ev.ToolCall(call_id="l", agent="worker", tool="list_files", arguments={"path": "."}),
        ev.ToolResult(call_id="l", tool="list_files", agent="worker", ok=True, output=LISTING),
        ev.ToolCall(call_id="r", agent="worker", tool="read_file", arguments={"path": "README.md"}),
        ev.ToolResult(call_id="r", tool="read_file", agent="worker", ok=True, output=READ),
        ev.ToolCall(call_id="b", agent="worker", tool="bash", arguments={"command": "ls"}),
        ev.ToolOutput(call_id="b", text="a.txt\nb.txt\n"),
        ev.ToolResult(call_id="b", tool="bash", agent="worker", ok=True, output="a.txt\nb.txt"),
    ]


def test_a_listing_keeps_its_folders_and_indentation() -> None:
    text = transcript(_whole_results())
    assert (
        "[0s] list_files .\n"
        "    ✓ 0.0s\n"
        "    │ [.: 5 entries, depth 2]\n"
        "    │ data/\n"
        "    │   train.txt  2.1 MiB\n"
        "    │   valid.txt  199.6 KiB\n"
        "    │ README.md  2.4 KiB\n"
        "    │ train.py  8.0 KiB\n"
    ) in text
    assert "    │      1  # tiny-lm\n    │      2\n    │      3    indented\n" in text


def test_verbose_shows_whole_results_and_each_command_s_output_once() -> None:
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False, verbose=True)
    for event in _whole_results():
        display.on_event(event)
    text = out.getvalue()
    plain = transcript(_whole_results())
    # -v shows all the plain view shows of a listing and a file read, and the header.
    for line in plain.splitlines():
        if line.startswith("    │") and "b.txt" not in line and "a.txt" not in line:
            assert line in text.splitlines(), line
    assert "    │ [README.md: lines 1-3 of 3]\n" in text
    # A command's output streamed as it came, and is not repeated under its result.
    assert text.endswith("[0s] $ ls\n    a.txt\n    b.txt\n    ✓ 0.0s\n"), text
