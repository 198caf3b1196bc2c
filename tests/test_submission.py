"""Honest scores: what is graded is what was submitted.

At a submission every process of the sandbox is stopped, the artifact is frozen
into the run folder with its digest, and the evaluator grades that copy; links
out of the artifact are refused; a run id stays inside the runs folder; and a
grader left running by a killed mlra is ended before the run is graded again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlra.agent import events as ev
from mlra.agent.eventlog import read_events
from mlra.tasks.grading import grade
from mlra.tasks.spec import load_task
from mlra.tasks.submission import SubmissionRefused, artifact_digest, freeze
from tests.conftest import SECRET_ENV, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, plan, supervisor_answering, turn


def _run(tmp_path: Path, task: Path, script: dict, *extra: str) -> tuple[int, str, Path]:
    """A scripted run through the real command line, unconfined (bubblewrap is not the point)."""
    with ScriptedModelServer(script) as server:
        proc = mlra_cli(
            [
                "run",
                str(task),
                "--model",
                "openai/test-model",
                "--base-url",
                server.url_for("openai"),  # type: ignore[arg-type]
                "--no-tui",
                "--isolation",
                "none",
                "--runs-dir",
                str(tmp_path / "runs"),
                *extra,
            ],
            cwd=tmp_path,
            timeout=120,
        )
    (run_dir,) = (tmp_path / "runs").iterdir()
    return proc.returncode, proc.stderr, run_dir


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _with_marker(marker: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline and "pytest" not in cmdline and _alive(int(proc.name)):
                found.append(int(proc.name))
    return found


def test_a_daemon_left_running_cannot_change_what_is_graded(
    tmp_path: Path, answer_task: Path
) -> None:
    # The daemon waits until the run ends (the submission or evaluation folder shows
    # up beside the workspace), then overwrites the answer: too late, by design.
    daemon = (
        "setsid sh -c ': rewriter-5521; "
        "while [ ! -e ../submission ] && [ ! -e ../evaluation ]; do touch beat; sleep 0.02; done; "
        "echo 41 > answer.txt; touch rewrote' >/dev/null 2>&1 </dev/null &"
    )
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn(
                "Answer, and leave a helper behind.",
                call("bash", command=f"echo 42 > answer.txt; {daemon}"),
            ),
            # The helper outlived the command that started it: it is still beating.
            turn(
                "Is it still there?",
                call(
                    "bash",
                    command="rm -f beat; until [ -e beat ]; do sleep 0.02; done; echo still-beating",
                    timeout=30,
                ),
            ),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    code, err, run_dir = _run(tmp_path, answer_task, script)
    assert code == 0, err
    events = read_events(run_dir / "events.jsonl")
    beating = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "bash"][-1]
    assert beating.ok and "still-beating" in beating.output
    submission = next(e for e in events if isinstance(e, ev.Submission))
    assert submission.sha256 == hashlib.sha256(b"42\n").hexdigest()
    assert submission.frozen == "submission/answer.txt" and submission.size_bytes == 3
    assert (run_dir / "submission" / "answer.txt").read_text() == "42\n"
    evaluation = next(e for e in events if isinstance(e, ev.EvaluationFinished))
    assert evaluation.score == 1.0
    started = next(e for e in events if isinstance(e, ev.EvaluationStarted))
    assert started.graded == "submission/answer.txt" and started.sha256 == submission.sha256
    # The daemon was stopped before the copy was taken: it never got to write.
    assert not _with_marker("rewriter-5521")
    assert not (run_dir / "workspace" / "rewrote").exists()
    assert (run_dir / "workspace" / "answer.txt").read_text() == "42\n"


def test_a_submitted_link_to_hidden_task_data_is_refused(tmp_path: Path, answer_task: Path) -> None:
    hidden = answer_task / "hidden" / "expected.txt"
    script = {
        "supervisor": [
            turn("", call("assign_subtask", step_id="1", instructions="Answer.")),
            turn("", call("submit", path="answer.txt")),
            # Told no, it stops: the task's artifact (the link still) is evaluated.
            *[turn("I am done.") for _ in range(4)],
        ],
        "worker": [
            turn("Borrow the answer.", call("bash", command=f"ln -s {hidden} answer.txt")),
            turn("", call("report", summary="answer.txt is ready")),
        ],
    }
    code, _err, run_dir = _run(tmp_path, answer_task, script)
    assert code == 1
    events = read_events(run_dir / "events.jsonl")
    refused = next(e for e in events if isinstance(e, ev.ToolResult) and e.tool == "submit")
    assert not refused.ok and "nothing was submitted" in refused.output
    assert "answer.txt is a symbolic link to" in refused.output
    assert "outside the workspace" in refused.output

    (submission,) = [e for e in events if isinstance(e, ev.Submission)]
    assert submission.path is None and submission.frozen is None and submission.sha256 is None
    evaluation = next(e for e in events if isinstance(e, ev.EvaluationFinished))
    assert not evaluation.ok and evaluation.score is None
    assert f"answer.txt is a symbolic link to {hidden}" in (evaluation.error or "")
    assert "outside the workspace" in (evaluation.error or "")
    assert not (run_dir / "submission").exists()  # nothing of the hidden file was copied


def _model_task(answer_task: Path, tmp_path: Path) -> Path:
    """The answer task, asking for a folder `model` holding answer.txt."""
    task = tmp_path / "folder-task"
    shutil.copytree(answer_task, task)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('artifact = "answer.txt"', 'artifact = "model"'))
    (task / "hidden" / "check.py").write_text(
        "import json, sys\nfrom pathlib import Path\n"
        "artifact, root, out = (Path(a) for a in sys.argv[1:4])\n"
        "given = (artifact / 'answer.txt').read_text().strip()\n"
        "expected = (root / 'hidden' / 'expected.txt').read_text().strip()\n"
        "out.write_text(json.dumps({'score': float(given == expected)}))\n"
    )
    return task


async def test_a_folder_with_a_link_out_of_it_is_refused(tmp_path: Path, answer_task: Path) -> None:
    task = load_task(_model_task(answer_task, tmp_path))
    workspace = tmp_path / "ws"
    model = workspace / "model"
    model.mkdir(parents=True)
    (model / "answer.txt").write_text("42\n")
    (workspace / "notes.txt").write_text("n")

    # A link inside the artifact is kept, as a relative link within the copy.
    (model / "alias.txt").symlink_to(model / "answer.txt")  # absolute, but inside
    frozen = freeze(workspace, "model", tmp_path / "frozen")
    alias = frozen.path / "alias.txt"
    assert alias.is_symlink() and os.readlink(alias) == "answer.txt"
    assert frozen.sha256 == artifact_digest(frozen.path)[0]
    _, finished = await grade(task, workspace, None, tmp_path / "eval", isolation="none")
    assert finished.ok and finished.score == 1.0

    for name, target in [
        ("leak", answer_task / "hidden" / "expected.txt"),
        ("up", Path("../notes.txt")),
    ]:
        (model / name).symlink_to(target)
        with pytest.raises(SubmissionRefused, match=f"model/{name} is a symbolic link to"):
            freeze(workspace, "model", tmp_path / "frozen")
        _, finished = await grade(task, workspace, None, tmp_path / "eval", isolation="none")
        assert not finished.ok and finished.score is None
        assert f"model/{name} is a symbolic link to {target}" in (finished.error or "")
        assert "outside the submitted artifact" in (finished.error or "")
        (model / name).unlink()


def test_submit_without_a_path_fails_when_the_task_artifact_is_missing(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": [
            turn("Submit straight away.", call("submit")),
            turn("Nothing there yet.", plan("Answer the question", "Submit")),
            turn("", call("assign_subtask", step_id="1", instructions="Write answer.txt.")),
            turn("", call("submit")),
        ],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="done")),
        ],
    }
    code, err, run_dir = _run(tmp_path, answer_task, script)
    assert code == 0, err
    events = read_events(run_dir / "events.jsonl")
    submits = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "submit"]
    assert not submits[0].ok and "does not exist in the workspace" in submits[0].output
    assert "nothing was submitted" in submits[0].output
    assert submits[1].ok
    assert len([e for e in events if isinstance(e, ev.Submission)]) == 1
    assert next(e for e in events if isinstance(e, ev.EvaluationFinished)).score == 1.0


@pytest.mark.parametrize("run_id", ["../x", "a/b", "/tmp/elsewhere", "", ".."])
def test_a_run_id_cannot_leave_the_runs_folder(
    tmp_path: Path, answer_task: Path, run_id: str
) -> None:
    runs = tmp_path / "runs"
    proc = mlra_cli(
        [
            "run",
            str(answer_task),
            "--model",
            "baseline",
            "--no-tui",
            "--runs-dir",
            str(runs),
            "--run-id",
            run_id,
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--run-id" in proc.stderr
    assert not runs.exists() and not (tmp_path / "x").exists()


def test_the_controller_refuses_a_run_id_out_of_the_runs_folder(
    tmp_path: Path, answer_task: Path
) -> None:
    from mlra.agent.config import RunConfig
    from mlra.agent.controller import RunController

    config = RunConfig(task="answer", model="baseline", runs_dir=tmp_path, run_id="../x")
    with pytest.raises(ValueError, match="plain folder name"):
        RunController(config, load_task(answer_task), None)


def test_a_stale_evaluator_is_ended_before_the_run_is_graded_again(
    tmp_path: Path, answer_task: Path
) -> None:
    task = tmp_path / "slow-task"
    shutil.copytree(answer_task, task)
    # Graded while `hold` exists, the script hangs (its pid written to `started`);
    # graded again, it says whether that first grader is still alive.
    (task / "hidden" / "check.py").write_text(
        "import json, os, sys, time\nfrom pathlib import Path\n"
        "artifact, root, out = (Path(a) for a in sys.argv[1:4])\n"
        "started = root / 'started'\n"
        "if (root / 'hold').exists() and not started.exists():\n"
        "    started.write_text(str(os.getpid()))\n"
        "    while True:\n"
        "        time.sleep(0.1)\n"
        "other = 0.0\n"
        "if started.exists():\n"
        "    try:\n"
        "        stat = Path('/proc', started.read_text(), 'stat').read_text()\n"
        "        other = float(stat.rsplit(')', 1)[1].split()[0] not in ('Z', 'X'))\n"
        "    except OSError:\n"
        "        pass\n"
        "given = artifact.read_text().strip()\n"
        "out.write_text(json.dumps({'score': float(given == '42'), 'metrics': {'other_grader_alive': other}}))\n"
    )
    runs = tmp_path / "runs"
    done = mlra_cli(
        ["run", str(task), "--model", "baseline", "--no-tui", "--isolation", "none",
         "--runs-dir", str(runs)],
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run_dir,) = runs.iterdir()

    (task / "hold").write_text("")
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    first = subprocess.Popen(
        [sys.executable, "-m", "mlra", "eval", str(run_dir), "--isolation", "none"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (task / "started").exists() or not (task / "started").read_text():
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        stale = int((task / "started").read_text())
        first.send_signal(signal.SIGKILL)  # a killed mlra: nothing of it cleans up
        first.wait()
        assert _alive(stale)  # its grader goes on without it

        again = mlra_cli(["eval", str(run_dir), "--isolation", "none"], cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert not _alive(stale)
        finished = read_events(run_dir / "events.jsonl")[-1]
        assert isinstance(finished, ev.EvaluationFinished) and finished.score == 1.0
        assert finished.metrics["other_grader_alive"] == 0.0  # never two graders
        assert finished.isolation == "none"
    finally:
        if first.poll() is None:
            first.kill()
        if (task / "started").exists():
            try:
                os.kill(int((task / "started").read_text()), signal.SIGKILL)
            except (ValueError, ProcessLookupError):
                pass


def test_a_folder_digest_covers_names_and_contents(tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.mkdir()
    (a / "x.txt").write_text("1")
    before = artifact_digest(a)
    (a / "x.txt").rename(a / "y.txt")
    after = artifact_digest(a)
    assert before[1] == after[1] == 1 and before[0] != after[0]
    (a / "y.txt").write_text("2")
    assert artifact_digest(a)[0] not in (before[0], after[0])
