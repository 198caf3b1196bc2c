"""An attempt started from another's workspace (`improve`, `debug`) gets a copy made inside
its budget (agent/run/attempt_copies.py): sparse files and hard links take on disk what they
took in the parent, FIFOs and sockets are skipped and said, a copy that would not fit is
refused in one line with nothing left, and the model never reads a host path. Scripted
models on the small `answer` task, real sandboxes."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.attempt_copies import clear_if_never_started
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn

PARENT_FILES = (
    "truncate -s 2G sparse.bin && head -c 50000000 /dev/urandom > big.bin && "
    "for i in $(seq 1 19); do ln big.bin link$i.bin; done && mkfifo pipe && "
    "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\" && "
    "echo 42 > answer.txt"
)


async def _search(
    runs: Path, answer_task: Path, script: Mapping[str, object], **settings: object
) -> tuple[RunController, ScriptedModelServer]:
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        cfg = RunConfig.model_validate(
            {
                "task": "answer",
                "model": "openai/test",
                "runs_dir": runs,
                "isolation": "auto",
                "search": "llm",
                "attempts": 2,
                **settings,
            }
        )
        controller = RunController(cfg, load_task(answer_task), provider)
        await controller.run(agent_for)
        await provider.aclose()
    return controller, server


def _script(parent_command: str) -> dict[str, object]:
    return {
        "supervisor": [
            turn("", call("attempt_start", instructions="Make the files")),
            turn("", call("attempt_wait", attempt="a1")),
            turn("", call("attempt_start", parent="a1", operator="improve", instructions="Go")),
            turn("", call("attempt_wait", attempt="a2")),
            turn("", call("attempts")),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command=parent_command)),
            turn("", call("report", summary="made them")),
            turn("", call("bash", command="ls; cat answer.txt")),
            turn("", call("report", summary="looked")),
        ],
    }


def _blocks(folder: Path) -> int:
    """Bytes on disk under `folder`, a hard-linked file once (as du counts)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for path in [folder, *folder.rglob("*")]:
        st = path.lstat()
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def _no_host_path(controller: RunController, server: ScriptedModelServer, runs: Path) -> None:
    """Nothing the supervisor or a worker was sent names the runs folder on the host."""
    for role in ("supervisor", "worker"):
        for request in server.requests_for(role):
            assert str(runs) not in json.dumps(request.body), role
    for event in read_events(controller.run_dir / "events.jsonl"):
        if isinstance(event, ev.AttemptFinished | ev.ToolResult):
            assert str(runs) not in event.model_dump_json()


async def test_a_sparse_file_and_hard_links_copy_as_they_are_and_a_fifo_is_skipped(
    tmp_path: Path, answer_task: Path
) -> None:
    runs = tmp_path / "runs"
    # No disk quota: a workspace that is a volume of its own comes back without its FIFO
    # and socket when its attempt ends (tools/sandbox/volume.py), and these are what
    # the copy must skip here.
    controller, server = await _search(runs, answer_task, _script(PARENT_FILES), disk_mb=0)
    attempts = controller.run_dir / "attempts"
    a1, a2 = attempts / "a1" / "workspace", attempts / "a2" / "workspace"
    events = read_events(controller.run_dir / "events.jsonl")
    finished = {e.attempt: e for e in events if isinstance(e, ev.AttemptFinished)}
    # It ran as any attempt does (its worker looked around and reported), not `lost`.
    assert finished["a2"].status != "lost" and finished["a2"].summary == "looked"
    # The copy takes on disk what the parent takes (not 2 GB, not 20 x 50 MB).
    parent, child = _blocks(a1), _blocks(a2)
    assert parent < 60_000_000 and abs(child - parent) < 2_000_000, (parent, child)
    assert (a2 / "sparse.bin").stat().st_size == 2 * 1024**3
    big = (a2 / "big.bin").stat()
    assert big.st_nlink == 20 and (a2 / "link7.bin").stat().st_ino == big.st_ino
    assert (a2 / "big.bin").read_bytes() == (a1 / "big.bin").read_bytes()
    assert not (a2 / "pipe").exists() and not (a2 / "sock").exists()
    # Said to a2's worker (its instructions), in its log, and in the searching run's.
    a2_worker = json.dumps(server.requests_for("worker")[2].body)
    assert "pipe (FIFO)" in a2_worker and "sock (socket)" in a2_worker
    notices = [e for e in read_events(attempts / "a2" / "events.jsonl") if isinstance(e, ev.Notice)]
    assert any("pipe (FIFO)" in n.message for n in notices)
    own = [e.message for e in events if isinstance(e, ev.Notice)]
    assert any(n.startswith("attempt a2: Not copied") and "sock (socket)" in n for n in own)
    _no_host_path(controller, server, runs)


@contextlib.contextmanager
def _small_disk(where: Path, size_mb: int) -> Iterator[Path]:
    """A tmpfs of `size_mb` at `where` (root only: else the test is skipped)."""
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)],
        capture_output=True,
    )
    if done.returncode != 0:
        pytest.skip(f"no tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


async def test_a_copy_that_would_not_fit_is_refused_in_one_line_with_nothing_left(
    tmp_path: Path, answer_task: Path
) -> None:
    """On a small runs disk (2,400 MB, of which it keeps 2,048 MB free), a parent holding
    60 MB cannot be copied into what is left of the run's disk (its own workspace's share
    and the parent's files taken): the attempt ends `stopped` with why, in one line, and
    no partial folder stays."""
    with _small_disk(tmp_path / "disk", 2400) as disk:
        runs = disk / "runs"
        command = "head -c 60000000 /dev/urandom > big.bin && mkfifo pipe && echo 42 > answer.txt"
        controller, server = await _search(runs, answer_task, _script(command))
        events = read_events(controller.run_dir / "events.jsonl")
        finished = {e.attempt: e for e in events if isinstance(e, ev.AttemptFinished)}
        a2 = finished["a2"]
        assert a2.status == "stopped"
        assert a2.why.startswith("not started: attempt a1's workspace takes 57.")  # MiB
        assert "\n" not in a2.why
        assert "every copy leaves" in a2.why or "this attempt's disk quota" in a2.why, a2.why
        assert not (controller.run_dir / "attempts" / "a2" / "workspace").exists()
        # The supervisor read it once, in the table attempt_wait returned.
        waits = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "attempt_wait"]
        assert "not started: attempt a1's workspace takes" in waits[-1].output
        assert len(server.requests_for("worker")) == 2  # a2's worker never ran
        _no_host_path(controller, server, runs)


def test_a_copy_cut_short_by_mlra_stopping_is_removed_when_the_run_is_resumed(
    tmp_path: Path,
) -> None:
    """mlra killed while it copied a parent's workspace leaves an attempt whose log is
    empty: taking the run up again removes the partial copy (the attempt is `lost`)."""
    cut_short = tmp_path / "a2"
    (cut_short / "workspace" / "sub").mkdir(parents=True)
    (cut_short / "workspace" / "sub" / "half.bin").write_bytes(b"x" * 4096)
    (cut_short / "events.jsonl").touch()
    assert clear_if_never_started(cut_short)
    assert not (cut_short / "workspace").exists()
    ran = tmp_path / "a1"
    (ran / "workspace").mkdir(parents=True)
    (ran / "events.jsonl").write_text('{"type": "run_started"}\n')
    assert not clear_if_never_started(ran) and (ran / "workspace").is_dir()
