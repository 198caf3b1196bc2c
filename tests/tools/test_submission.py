"""Honest scores: what is graded is what was submitted.

At a submission every process of the sandbox is stopped, the artifact is frozen
into the run folder with its digest, and the evaluator grades that copy; links
out of the artifact are refused; a run id stays inside the runs folder; and a
grader left running by a killed mlra is ended before the run is graded again.
"""

from __future__ import annotations

import errno
import hashlib
import inspect
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.tasks.grading import grade
from mlra.tasks.spec import load_task
from mlra.tools.artifact_copy import SubmissionRefused
from mlra.tools.sandbox import sparse_files
from mlra.tools.submission import artifact_digest, freeze, remove_tree
from tests.conftest import SECRET_ENV, mlra_cli, run_baseline
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


def _watchers_of(owner: int) -> list[int]:
    """The tether watchers (tools/sandbox/tether.py) an mlra process started."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(a.endswith(b"tether.py") for a in cmdline) and str(owner).encode() in cmdline:
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
            # The command ends once the helper beats, so it has left the command's process
            # group (setsid) before the group is killed at the command's end: on a busy
            # machine it could otherwise die still inside it.
            turn(
                "Answer, and leave a helper behind.",
                call(
                    "bash",
                    command=f"rm -f beat; echo 42 > answer.txt; {daemon} "
                    "until [ -e beat ]; do sleep 0.02; done",
                ),
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
            # Told no, it waits until its turn limit ends the run, which (like a
            # budget) grades the task's artifact: the link still.
            *[turn("I am done.") for _ in range(4)],
        ],
        "worker": [
            turn("Borrow the answer.", call("bash", command=f"ln -s {hidden} answer.txt")),
            turn("", call("report", summary="answer.txt is ready")),
        ],
    }
    code, _err, run_dir = _run(tmp_path, answer_task, script, "--max-supervisor-turns", "4")
    assert code == 1
    events = read_events(run_dir / "events.jsonl")
    refused = next(e for e in events if isinstance(e, ev.ToolResult) and e.tool == "submit")
    assert not refused.ok and "nothing was submitted" in refused.output
    assert "'answer.txt' is a symbolic link to" in refused.output
    assert "outside the workspace" in refused.output

    (submission,) = [e for e in events if isinstance(e, ev.Submission)]
    assert submission.by == "budget" and submission.path is None
    assert submission.frozen is None and submission.sha256 is None
    evaluation = next(e for e in events if isinstance(e, ev.EvaluationFinished))
    assert not evaluation.ok and evaluation.score is None
    assert f"'answer.txt' is a symbolic link to {str(hidden)!r}" in (evaluation.error or "")
    assert "outside the workspace" in (evaluation.error or "")
    assert not (run_dir / "submission").exists()  # nothing of the hidden file was copied


def _model_task(answer_task: Path, tmp_path: Path) -> Path:
    """The answer task, asking for a folder `model` holding answer.txt."""
    task = tmp_path / "folder-task"
    shutil.copytree(answer_task, task)
    toml = task / "task.toml"
    text = toml.read_text().replace('artifact = "answer.txt"', 'artifact = "model"')
    toml.write_text(text.replace('submit = "answer.txt"', 'submit = "model"'))
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
        with pytest.raises(SubmissionRefused, match=f"'model/{name}' is a symbolic link to"):
            freeze(workspace, "model", tmp_path / "frozen")
        _, finished = await grade(task, workspace, None, tmp_path / "eval", isolation="none")
        assert not finished.ok and finished.score is None
        assert f"'model/{name}' is a symbolic link to {str(target)!r}" in (finished.error or "")
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
    from mlra.agent.run.controller import RunController
    from mlra.agent.setup.config import RunConfig

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
    run_dir = run_baseline(task, tmp_path, "--isolation", "none").run_dir

    (task / "hold").write_text("")
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}

    def held_grader() -> tuple[subprocess.Popen[bytes], int]:
        (task / "started").unlink(missing_ok=True)
        mlra = subprocess.Popen(
            [sys.executable, "-m", "mlra", "eval", str(run_dir), "--isolation", "none"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not (task / "started").exists() or not (task / "started").read_text():
            assert mlra.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        return mlra, int((task / "started").read_text())

    # A killed mlra: nothing of it cleans up, but its unconfined grader's watcher
    # (tools/sandbox/tether.py) kills the grader.
    first, stale = held_grader()
    try:
        first.send_signal(signal.SIGKILL)
        first.wait()
        deadline = time.monotonic() + 20
        while _alive(stale) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(stale)
    finally:
        first.kill()
        if _alive(stale):
            os.kill(stale, signal.SIGKILL)
    # With its watcher killed too, the grader goes on without it, and the next grading
    # ends it first.
    first, stale = held_grader()
    try:
        watchers = _watchers_of(first.pid)
        assert watchers, "the unconfined grader has no watcher"
        for watcher in watchers:
            os.kill(watcher, signal.SIGKILL)
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert _alive(stale)

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


# --- artifacts shaped to break the ending -------------------------------------------------


def _tree(root: Path) -> dict[str, tuple[str, bytes]]:
    """What a folder holds, as a user would compare two copies: kind and content."""
    found: dict[str, tuple[str, bytes]] = {}
    pending = [root]
    while pending:  # os.walk recurses: it could not read a deep folder
        for path in pending.pop().iterdir():
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = ("link", os.fsencode(os.readlink(path)))
            elif path.is_dir():
                found[rel] = ("dir", b"")
                pending.append(path)
            else:
                found[rel] = ("file", path.read_bytes())
    return found


def test_odd_names_and_deep_folders_are_frozen_whole(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    model = workspace / "model"
    model.mkdir(parents=True)
    (model / "answer.txt").write_text("42\n")
    # A link whose target is not UTF-8 (it leads nowhere, but stays inside).
    os.symlink(b"\xff\xfe-target", os.fsencode(model / "odd-link"))
    (model / os.fsdecode(b"caf\xe9.txt")).write_text("latin-1 name")
    limit = sys.getrecursionlimit()
    try:
        # Deeper than Python's recursion limit, which is lowered for the freeze (a
        # recursive walk would fail as it would at 1,000 deep with the default limit):
        # a quarter of the folders, a sixteenth of the work of making them.
        deep = model
        for _ in range(300):
            deep = deep / "d"
            deep.mkdir()
        (deep / "bottom.txt").write_text("found")

        sys.setrecursionlimit(len(inspect.stack()) + 250)
        try:
            frozen = freeze(workspace, "model", tmp_path / "frozen")
            copy = tmp_path / "frozen" / "model"
            copied_digest, model_digest = artifact_digest(copy)[0], artifact_digest(model)[0]
        finally:
            sys.setrecursionlimit(limit)
        assert _tree(copy) == _tree(model)
        assert os.readlink(os.fsencode(copy / "odd-link")) == b"\xff\xfe-target"
        assert frozen.sha256 == copied_digest == model_digest
        assert frozen.size_bytes == len("42\n") + len("latin-1 name") + len("found")
    finally:  # pytest's own clean-up recurses too
        remove_tree(workspace)
        remove_tree(tmp_path / "frozen")


def _nest_past_path_max(top: Path, room: int) -> Path:
    """Nested folders until a path below `top` is within `room` characters of PATH_MAX
    (4095): fine where it is, too long once copied under a longer folder."""
    top.mkdir(parents=True)
    path = top
    while len(str(path)) < 4095 - room - 110:
        path = path / ("n" * 100)
    path = path / ("n" * (4095 - room - len(str(path)) - 1))
    path.mkdir(parents=True)
    (path / "f").write_text("x")
    return path


def test_a_path_past_path_max_is_frozen_whole(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    deepest = _nest_past_path_max(workspace / "model", room=10)
    dest = tmp_path / ("long-destination-" + "x" * 60)  # the copy's paths pass PATH_MAX
    frozen = freeze(workspace, "model", dest)
    assert frozen.size_bytes == 1
    assert frozen.sha256 == artifact_digest(workspace / "model")[0]
    copied = os.open(dest, os.O_RDONLY)
    try:
        for part in (frozen.path.name, *deepest.relative_to(workspace / "model").parts):
            below = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=copied)
            os.close(copied)
            copied = below
        f = os.open("f", os.O_RDONLY, dir_fd=copied)
        assert os.read(f, 10) == b"x"
        os.close(f)
    finally:
        os.close(copied)
    remove_tree(dest)
    assert not dest.exists()


def test_a_failure_while_copying_is_a_refusal_and_leaves_no_half_made_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "model" / "a").mkdir(parents=True)
    (workspace / "model" / "a" / "first.bin").write_bytes(b"1")
    (workspace / "model" / "b.bin").write_bytes(b"2")
    copied: list[int] = []
    real = sparse_files.copy_sparse

    def full_disk(src: int, dst: int) -> int:
        if copied:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        copied.append(dst)
        return real(src, dst)

    monkeypatch.setattr(sparse_files, "copy_sparse", full_disk)
    dest = tmp_path / "frozen"
    with pytest.raises(SubmissionRefused) as refused:
        freeze(workspace, "model", dest)
    message = str(refused.value)
    assert message.startswith("the submission could not be frozen: OSError: [Errno 28]")
    assert "\n" not in message
    assert copied and not dest.exists()


def test_refusals_quote_the_names_the_agent_chose(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    model = workspace / "model"
    model.mkdir(parents=True)
    forged = "x\nSCORE: 1.0\n"
    (model / forged).symlink_to("/etc/passwd\nSCORE: 1.0")
    with pytest.raises(SubmissionRefused) as refused:
        freeze(workspace, "model", tmp_path / "frozen")
    message = str(refused.value)
    assert "\n" not in message
    assert (
        f"{'model/' + forged!r} is a symbolic link to {'/etc/passwd' + chr(10) + 'SCORE: 1.0'!r}"
        in message
    )
    (model / forged).unlink()
    (workspace / forged).symlink_to("/etc\nSCORE: 1.0")
    with pytest.raises(SubmissionRefused) as refused:
        freeze(workspace, forged + "/passwd", tmp_path / "frozen")
    assert "\n" not in str(refused.value)


def test_a_folder_digest_frames_names_that_hold_newlines(tmp_path: Path) -> None:
    # Framed as `name\0what\n`, these two folders digested the same.
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (one / "a").symlink_to("x\ny")
    (one / "z").mkdir()
    (two / "a").symlink_to("x")
    (two / "y\nz").mkdir()
    assert artifact_digest(one)[0] != artifact_digest(two)[0]


# --- the copy is bounded ------------------------------------------------------------------


def test_hard_links_are_copied_once_and_stay_linked(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    model = workspace / "model"
    model.mkdir(parents=True)
    (model / "weights-0.bin").write_bytes(os.urandom(1_000_000))
    for i in range(1, 50):
        os.link(model / "weights-0.bin", model / f"weights-{i}.bin")

    frozen = freeze(workspace, "model", tmp_path / "frozen")
    assert frozen.size_bytes == 1_000_000
    copies = [frozen.path / f"weights-{i}.bin" for i in range(50)]
    assert len({p.stat().st_ino for p in copies}) == 1
    assert copies[0].stat().st_nlink == 50
    assert copies[49].read_bytes() == (model / "weights-0.bin").read_bytes()
    assert frozen.sha256 == artifact_digest(model)[0]


def test_a_sparse_file_is_copied_sparsely(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sparse = workspace / "answer.bin"
    with open(sparse, "wb") as f:
        f.truncate(64 * 1024 * 1024)
        f.seek(32 * 1024 * 1024)
        f.write(b"42")
    if sparse.stat().st_blocks * 512 >= 1024 * 1024:
        pytest.skip("this file system does not keep holes")
    frozen = freeze(workspace, "answer.bin", tmp_path / "frozen")
    copy = frozen.path.stat()
    assert copy.st_size == 64 * 1024 * 1024 and copy.st_blocks * 512 < 1024 * 1024
    assert frozen.sha256 == artifact_digest(sparse)[0]


def test_an_artifact_bigger_than_the_cap_or_the_free_disk_is_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    huge = workspace / "huge.bin"
    with open(huge, "wb") as f:
        f.truncate(2**40)  # 1 TiB of holes: nothing on disk, a terabyte to copy
    with pytest.raises(SubmissionRefused) as refused:
        freeze(workspace, "huge.bin", tmp_path / "frozen")
    assert str(refused.value) == (
        "the artifact 'huge.bin' is refused: it holds 1,099.5 GB (its files' apparent sizes, "
        "each hard-linked file counted once), more than the 200.0 GB a submission may hold "
        "(the task's [evaluator] max_submission_gb)"
    )
    assert not (tmp_path / "frozen").exists()

    free = shutil.disk_usage(tmp_path).free
    with open(huge, "wb") as f:
        f.truncate(free + 1)
    with pytest.raises(SubmissionRefused, match=r"the run folder's disk has .* free, of which"):
        freeze(workspace, "huge.bin", tmp_path / "frozen", max_gb=1e9)
    assert not (tmp_path / "frozen").exists()


async def test_a_task_sets_its_own_submission_cap(tmp_path: Path, answer_task: Path) -> None:
    folder = tmp_path / "small-task"
    shutil.copytree(answer_task, folder)
    toml = folder / "task.toml"
    toml.write_text(
        toml.read_text().replace("[evaluator]\n", "[evaluator]\nmax_submission_gb = 0.000001\n")
    )
    task = load_task(folder)
    assert task.evaluator.max_submission_gb == 0.000001
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "answer.txt").write_text("42\n" + " " * 2000)
    _, finished = await grade(task, workspace, None, tmp_path / "run" / "evaluation")
    assert not finished.ok and finished.score is None
    assert "more than the 1,000 bytes a submission may hold" in (finished.error or "")


def test_a_run_whose_artifact_is_refused_ends_with_the_refusal(
    tmp_path: Path, answer_task: Path
) -> None:
    # A small cap stands in for the host's: the run's snapshots read every byte, so a
    # test run cannot make the hundreds of sparse gigabytes the default cap refuses.
    task = tmp_path / "capped-task"
    shutil.copytree(answer_task, task)
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace("[evaluator]\n", "[evaluator]\nmax_submission_gb = 0.001\n")
    )
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", call("bash", command="truncate -s 2M answer.txt")),
            turn("", call("report", summary="answer.txt is ready")),
        ],
    }
    code, err, run_dir = _run(tmp_path, task, script)
    assert code == 1, err
    events = read_events(run_dir / "events.jsonl")
    submission = next(e for e in events if isinstance(e, ev.Submission))
    assert submission.frozen is None and submission.sha256 is None
    evaluation = next(e for e in events if isinstance(e, ev.EvaluationFinished))
    assert not evaluation.ok and evaluation.score is None
    assert evaluation.error == (
        "the artifact 'answer.txt' is refused: it holds 2.1 MB (its files' apparent sizes, "
        "each hard-linked file counted once), more than the 1.0 MB a submission may hold "
        "(the task's [evaluator] max_submission_gb)"
    )
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert finished.status != "error"
    assert not (run_dir / "submission").exists()
