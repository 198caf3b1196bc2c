"""Annotations of a run's steps: kept beside the log (never in it, never within the
sandbox's reach), added with `mlra annotate` while the run is live and after it was
killed, kept through `mlra resume`, and shown by `mlra runs`, the replay and the batch
report.

The scripted run goes through the real command line, the real SDK and the scripted
model server (answering by the length of the conversation, as a stateless model does,
so the resumed run gets the same answers), in a real bubblewrap sandbox.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.record.annotations import (
    ANNOTATIONS_FILE,
    Annotation,
    StepIndex,
    append_annotation,
    load_annotations,
    read_annotations,
    worker_steps,
)
from mlra.agent.record.eventlog import EVENTS_FILE, read_events
from mlra.batch.report import write_report
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.panes.transcript_entries import NoteEntry
from mlra.console.text.replay import ReplayModel
from tests.agent.test_resume import _cmd, _env, _read, _run_args
from tests.conftest import ANSWER_TASK, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, plan, turn

COMMENT = "read the question before anything"
PROBE_COMMENT = "pokes at the notes file"


def _script(run_dir: Path) -> dict[str, Any]:
    """Step 2 waits (for `go`, made once the test has annotated the live run), then
    tries to read and forge the run's notes from inside the sandbox."""
    notes = run_dir / ANNOTATIONS_FILE
    probe = (
        "touch .waiting; while [ ! -e go ]; do sleep 0.05; done; "
        f"cat {notes}; echo forged >> {notes}; ls {run_dir}; echo probed"
    )
    return {
        "supervisor": [
            turn("Plan first.", plan("Answer the question", "Submit")),
            turn("", call("assign_subtask", step_id="1", instructions="Answer question.txt.")),
            turn("Done; marking it.", plan("Answer the question", "Submit", done=1)),
            # Held: the run is killed while it waits here, then resumed.
            {**turn("", call("submit", path="answer.txt", note="the answer")), "hang": 300},
        ],
        "supervisor:fallback": turn("", call("submit", path="answer.txt", note="the answer")),
        "worker": [
            turn("Read the question.", call("read_file", path="question.txt")),
            turn("Look at the run folder.", call("bash", command=probe)),
            turn("Write the answer.", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }


def _wait(what: str, ready: Callable[[], bool], proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while not ready():
        # Polling what another process writes: there is nothing to await.
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"the run never reached {what}"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run annotated live (step 1) and after a SIGKILL (step 2), then resumed to its end."""
    tmp = tmp_path_factory.mktemp("annotated")
    runs = tmp / "runs"
    run_dir = runs / "r"
    script = _script(run_dir)
    with ScriptedModelServer(script, turn_by_history=True) as server:
        proc = subprocess.Popen(
            _cmd(_run_args(server, runs, "r", ANSWER_TASK)),
            cwd=tmp,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait("step 2's command", (run_dir / "workspace" / ".waiting").exists, proc)
            live = mlra_cli(
                [
                    *("annotate", "r", "--runs-dir", str(runs), "--step", "1", "--tag", "data"),
                    *("--comment", COMMENT, "--rating", "+1"),
                ],
                cwd=tmp,
            )
            assert live.returncode == 0, live.stderr
            assert "annotated step 1 of r: #data · +1 · " + COMMENT in live.stdout
            (run_dir / "workspace" / "go").touch()
            held = b'"type":"step_started","agent":"supervisor","step":4'
            _wait("the held submit", lambda: held in _read(run_dir / EVENTS_FILE), proc)
            proc.send_signal(signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        dead = mlra_cli(
            [
                *("annotate", str(run_dir), "--step", "2", "--tag", "sandbox", "--tag", "probe"),
                *("--comment", PROBE_COMMENT, "--rating", "-1"),
            ],
            cwd=tmp,
        )
        assert dead.returncode == 0, dead.stderr
        server.script["supervisor"][-1] = {
            k: v for k, v in server.script["supervisor"][-1].items() if k != "hang"
        }
        done = mlra_cli(["resume", str(run_dir), "--no-tui"], cwd=tmp, env=_env())
    assert done.returncode == 0, done.stdout + done.stderr
    return run_dir


def test_notes_survive_resume_beside_a_log_the_sandbox_cannot_reach(resumed: Path) -> None:
    events = read_events(resumed / EVENTS_FILE)
    assert any(isinstance(e, ev.RunResumed) for e in events)
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"
    notes = read_annotations(resumed)
    assert [(n.step, n.tags, n.rating, n.comment) for n in notes] == [
        (1, ["data"], 1, COMMENT),
        (2, ["sandbox", "probe"], -1, PROBE_COMMENT),
    ]
    starts = {
        e.step: e.seq for e in events if isinstance(e, ev.StepStarted) and e.agent == "worker"
    }
    assert [n.seq for n in notes] == [starts[1], starts[2]]
    assert all(n.who.count("@") == 1 and n.ts > 0 for n in notes)
    # The agent's record holds no note; the notes file only the two.
    log = (resumed / EVENTS_FILE).read_text()
    assert COMMENT not in log and PROBE_COMMENT not in log
    assert (resumed / ANNOTATIONS_FILE).read_bytes().count(b"\n") == 2
    # From inside the sandbox the run folder is not there: the notes could be neither
    # read nor forged (the command ran after the first note was written).
    probe = next(e for e in events if isinstance(e, ev.ToolResult) and "probed" in e.output)
    assert f"cat: {resumed / ANNOTATIONS_FILE}: No such file or directory" in probe.output
    assert COMMENT not in probe.output and "forged" not in (resumed / ANNOTATIONS_FILE).read_text()


def test_runs_listing_counts_notes(resumed: Path) -> None:
    runs = resumed.parent
    listed = mlra_cli(["runs", "--runs-dir", str(runs), "--json"], cwd=runs)
    assert listed.returncode == 0, listed.stderr
    row = json.loads(listed.stdout.splitlines()[0])
    assert row["id"] == "r" and row["annotations"] == 2
    table = mlra_cli(["runs", "--runs-dir", str(runs)], cwd=runs)
    header, line = table.stdout.splitlines()[:2]
    assert header.split()[-1] == "notes" and line.split()[-1] == "2"
    assert "notes: annotations" in table.stderr


def test_a_replay_transcript_prints_each_note_under_its_step(resumed: Path) -> None:
    shown = mlra_cli(["replay", str(resumed), "--no-tui"], cwd=resumed.parent)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    noted = [i for i, line in enumerate(lines) if "✎ note on step" in line]
    assert [lines[i].strip().split(" · ")[0] for i in noted] == [
        "✎ note on step 1: #data",
        "✎ note on step 2: #sandbox #probe",
    ]
    assert "-1" in lines[noted[1]] and "+1" in lines[noted[0]]
    # Each where its step begins: the next thing the worker says is that step's.
    after = [next(line for line in lines[i:] if "worker: " in line) for i in noted]
    assert after[0].endswith("worker: Read the question."), after
    assert after[1].endswith("worker: Look at the run folder."), after
    cut = mlra_cli(["replay", str(resumed), "--no-tui", "--at", "2"], cwd=resumed.parent)
    assert cut.stdout.count("✎ note on step") == 1, cut.stdout
    assert "✎ note on step 2: #sandbox #probe" in cut.stdout, cut.stdout


def test_batch_report_lists_tags_per_run(resumed: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    shutil.copytree(resumed.parent, out, ignore=shutil.ignore_patterns("workspace", "snapshots"))
    write_report(out, plots=False)
    report = (out / "report.md").read_text()
    assert "- r: #data ×1, #probe ×1, #sandbox ×1; 2 notes" in report
    row = json.loads((out / "report.json").read_text())["runs"][0]
    assert row["tags"] == {"data": 1, "sandbox": 1, "probe": 1} and row["annotations"] == 2


async def test_replay_jumps_to_the_notes_and_search_finds_them(resumed: Path) -> None:
    model = ReplayModel.open(resumed)
    assert [model.events[i].seq for i in model.marks["annotation"]] == [
        n.seq for n in read_annotations(resumed)
    ]
    app = ReplayApp(model)
    async with app.run_test(size=(160, 48)) as pilot:
        # A finished run's replay opens on its verdict, at the end: Home, then the notes.
        await pilot.press("home", "o")
        assert model.position().step == 1
        await pilot.press("o")
        assert model.position().step == 2
        shown = [
            str(e.line)
            for e in app.query_one(TranscriptPane).query(NoteEntry)
            if isinstance(e.key, tuple) and e.key[0] == "annotation"
        ]
        assert any(PROBE_COMMENT in line and "#sandbox #probe" in line for line in shown)
        await pilot.press("home", "slash", *"BEFORE ANYTHING", "enter")
        assert model.cursor == model.marks["annotation"][0]
        assert model.position().step == 1


def test_cli_adds_lists_exports_and_refuses_in_one_line(resumed: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    shutil.copytree(resumed, run_dir, ignore=shutil.ignore_patterns("workspace", "snapshots"))
    added = mlra_cli(
        ["annotate", "r", "--runs-dir", str(tmp_path), "--step", "3", "--tag", "x"], cwd=tmp_path
    )
    assert added.returncode == 0 and "annotated step 3 of r: #x" in added.stdout
    listed = mlra_cli(["annotate", str(run_dir)], cwd=tmp_path)
    assert [line.split()[:2] for line in listed.stdout.splitlines()] == [
        ["step", "1"],
        ["step", "2"],
        ["step", "3"],
    ]
    exported = mlra_cli(["annotate", str(run_dir), "--json"], cwd=tmp_path)
    notes = [json.loads(line) for line in exported.stdout.splitlines()]
    assert set(notes[0]) == {"id", "step", "seq", "tags", "comment", "rating", "who", "ts"}
    assert [Annotation.model_validate(n) for n in notes] == read_annotations(run_dir)
    refusals = {
        "no worker step 99": ["--step", "99", "--tag", "x"],
        "+1 or -1": ["--step", "1", "--rating", "2"],
        "nothing to annotate": ["--step", "1"],
        "give --step": ["--tag", "x"],
        "one word": ["--step", "1", "--tag", "two words"],
    }
    for expected, args in refusals.items():
        proc = mlra_cli(["annotate", str(run_dir), *args], cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and expected in proc.stderr, proc.stderr
    missing = mlra_cli(["annotate", "nope", "--runs-dir", str(tmp_path)], cwd=tmp_path)
    assert missing.returncode == 2 and "not a run folder" in missing.stderr
    assert len(read_annotations(run_dir)) == 3  # the refusals wrote nothing


def _append_many(run_dir: str, who: str) -> None:
    for i in range(200):
        append_annotation(
            Path(run_dir), Annotation(step=1, seq=1, comment=f"{who} {i} " * 200, who=who)
        )


def test_writers_at_once_never_interleave_and_a_damaged_line_is_skipped(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    writers = [ctx.Process(target=_append_many, args=(str(tmp_path), w)) for w in ("a", "b")]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
        assert w.exitcode == 0
    notes, skipped = load_annotations(tmp_path)
    assert len(notes) == 400 and skipped == 0
    with open(tmp_path / ANNOTATIONS_FILE, "ab") as f:
        f.write(b'{"step": 1, "seq": \n')  # a torn line, then a good one after it
    append_annotation(tmp_path, Annotation(step=2, seq=5, tags=["after"]))
    notes, skipped = load_annotations(tmp_path)
    assert len(notes) == 401 and skipped == 1 and notes[-1].tags == ["after"]
    assert oct(os.stat(tmp_path / ANNOTATIONS_FILE).st_mode & 0o777) == "0o600"


def test_the_step_index_reads_only_what_the_log_gained(tmp_path: Path) -> None:
    def line(seq: int, agent: ev.AgentRole, step: int) -> bytes:
        e = ev.StepStarted(seq=seq, agent=agent, step=step, turn=step)
        return e.model_dump_json().encode() + b"\n"

    log = tmp_path / EVENTS_FILE
    log.write_bytes(line(1, "supervisor", 1) + line(2, "worker", 1))
    index = StepIndex(tmp_path)
    assert index.update() == {1: 2}
    whole = line(3, "worker", 2)
    with open(log, "ab") as f:
        f.write(whole[:20])  # half-written: left for the next update
    assert index.update() == {1: 2}
    with open(log, "ab") as f:
        f.write(whole[20:])
    assert index.update() == {1: 2, 2: 3} == worker_steps(tmp_path)
