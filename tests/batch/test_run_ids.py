"""A batch's run ids (issue 24: runs cannot see each other): readable, with a suffix no
run can compute; found again by the same command; a folder made before keyed ids goes
on under its old names; and a run of a batch reaches neither its neighbours nor the key."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlra.batch.errors import BatchError
from mlra.batch.executors.local import Capacity, LocalExecutor
from mlra.batch.run_ids import KEY_FILE, RunNames, readable_id, run_names
from mlra.batch.runner import BatchRunner
from mlra.batch.spec import BatchSpec, expand
from tests.batch.naming import batch_run_id
from tests.batch.test_batch import MODEL, supervisor_fallback
from tests.conftest import mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn

KEYED = re.compile(r"(answer__[A-Za-z0-9._-]+__s\d)-([0-9a-f]{16})")


def _spec(task: Path, out: Path, *, seeds: int = 2) -> BatchSpec:
    return BatchSpec(
        tasks=[str(task)], models=["baseline", MODEL], seeds=seeds, out=out, isolation="none"
    )


def test_two_batch_folders_of_one_spec_name_their_runs_apart(
    tmp_path: Path, answer_task: Path
) -> None:
    first = expand(_spec(answer_task, tmp_path / "a"), run_names(tmp_path / "a"))
    second = expand(_spec(answer_task, tmp_path / "b"), run_names(tmp_path / "b"))
    assert len(first) == len(second) == 4
    for mine, theirs in zip(first, second, strict=True):
        # The readable part is the same (people and reports use it); the suffix is not.
        a, b = KEYED.fullmatch(mine.run_id), KEYED.fullmatch(theirs.run_id)
        assert a and b, (mine.run_id, theirs.run_id)
        assert a[1] == b[1] == readable_id(mine.task_name, mine.model, mine.seed)
        assert a[2] != b[2]
    assert len({r.run_id for r in first}) == 4
    # Knowing every run's task, model and seed, and its own id, a run cannot compute a
    # neighbour's: the suffix is a keyed hash, not of anything the run sees.
    assert {r.run_id for r in first} != {readable_id(r.task_name, r.model, r.seed) for r in first}

    # Asked again (a second invocation), the folder names its runs as before.
    again = expand(_spec(answer_task, tmp_path / "a"), run_names(tmp_path / "a"))
    assert [r.run_id for r in again] == [r.run_id for r in first]


def test_the_key_is_private_made_once_and_agreed_on_by_drivers_racing(tmp_path: Path) -> None:
    out = tmp_path / "b"
    barrier = threading.Barrier(8)
    found: list[RunNames] = []

    def driver() -> None:
        barrier.wait()
        found.append(run_names(out))

    threads = [threading.Thread(target=driver) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(found) == 8 and len({n.key for n in found}) == 1 and found[0].key
    info = (out / KEY_FILE).lstat()
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert sorted(p.name for p in out.iterdir()) == [KEY_FILE]  # no half-made key left

    # A copy that lost its mode (cp with the umask) is made private again when read.
    os.chmod(out / KEY_FILE, 0o644)
    assert run_names(out) == found[0]
    assert stat.S_IMODE((out / KEY_FILE).stat().st_mode) == 0o600

    # A key file that is a link, or holds no key, is refused rather than followed or replaced.
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / KEY_FILE).symlink_to(out / KEY_FILE)
    with pytest.raises(BatchError, match=KEY_FILE):
        run_names(linked)
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / KEY_FILE).write_text("not a key\n")
    with pytest.raises(BatchError, match="holds no batch key"):
        run_names(damaged)


@pytest.mark.parametrize(
    "trace",
    [
        "runs/answer__baseline__s1",
        "retired/answer__baseline__s1__a1",
        "logs/answer__baseline__s1.json",
    ],
)
def test_a_folder_with_runs_named_the_old_way_keeps_those_names(tmp_path: Path, trace: str) -> None:
    (tmp_path / trace).parent.mkdir(parents=True)
    (tmp_path / trace).mkdir() if "." not in Path(trace).name else (tmp_path / trace).touch()
    names = run_names(tmp_path)
    assert names.legacy and names.run_id("answer", "baseline", 2) == "answer__baseline__s2"
    assert not (tmp_path / KEY_FILE).exists()


def _baseline_batch(tmp_path: Path, out: Path, seeds: int) -> list[str]:
    return ["batch", "--tasks", "answer_task", "--models", "baseline", "--seeds", str(seeds),
            "--out", str(out), "--isolation", "none", "--no-tui"]  # fmt: skip


async def test_a_legacy_batch_folder_is_continued_under_its_old_names(
    tmp_path: Path, answer_task: Path
) -> None:
    """A batch folder made before keyed ids: its finished run is found and skipped, the
    rest start under old-style names beside it, and no key is made for it."""
    (tmp_path / "answer_task").symlink_to(answer_task)
    out = tmp_path / "b"
    spec = BatchSpec(tasks=[str(answer_task)], models=["baseline"], out=out, isolation="none")
    # What the batch command did before: runs named <task>__<model>__s<seed>, no key.
    executor = LocalExecutor(Capacity(cpus=2, memory_gb=8, gpus=[]))
    progress = await BatchRunner(spec, expand(spec, RunNames(None)), executor, out).run()
    assert progress.count("finished") == 1
    stamp = (out / "runs" / "answer__baseline__s1" / "result.json").stat().st_mtime_ns

    proc = mlra_cli(_baseline_batch(tmp_path, out, seeds=2), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2/2 finished (1 already were; 0 retries)" in proc.stdout
    assert "predates keyed run ids" in proc.stdout
    assert sorted(p.name for p in (out / "runs").iterdir()) == [
        "answer__baseline__s1",
        "answer__baseline__s2",
    ]
    assert (out / "runs" / "answer__baseline__s1" / "result.json").stat().st_mtime_ns == stamp
    assert not (out / KEY_FILE).exists()
    report = json.loads((out / "report.json").read_text())
    assert report["groups"][0]["runs"] == 2 and report["groups"][0]["score_mean"] == 1.0


def test_a_batch_run_again_finds_its_runs_and_one_whose_key_is_gone_is_refused(
    tmp_path: Path, answer_task: Path
) -> None:
    (tmp_path / "answer_task").symlink_to(answer_task)
    out = tmp_path / "b"
    proc = mlra_cli(_baseline_batch(tmp_path, out, seeds=1), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "predates" not in proc.stdout
    [run] = [p.name for p in (out / "runs").iterdir()]
    assert run == batch_run_id(out, "baseline") and KEYED.fullmatch(run)
    assert stat.S_IMODE((out / KEY_FILE).stat().st_mode) == 0o600

    # The same command with one more seed: the first run is found and skipped.
    proc = mlra_cli(_baseline_batch(tmp_path, out, seeds=2), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2/2 finished (1 already were; 0 retries)" in proc.stdout
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(
        batch_run_id(out, "baseline", seed) for seed in (1, 2)
    )
    assert {p.name for p in (out / "logs").iterdir()} == {
        f"{batch_run_id(out, 'baseline', seed)}{ext}"
        for seed in (1, 2)
        for ext in (".log", ".json")
    }

    # Without its key, the folder's runs cannot be named again: refused, nothing started.
    (out / KEY_FILE).unlink()
    proc = mlra_cli(_baseline_batch(tmp_path, out, seeds=3), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert KEY_FILE in line and "another --out" in line
    assert len(list((out / "runs").iterdir())) == 2 and not (out / KEY_FILE).exists()


def _bwrap_problem() -> str | None:
    from mlra.tools.sandbox.bwrap import isolation_problem

    return isolation_problem()


@pytest.fixture(params=["tmp", "shown"])
def batch_out(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """Where the batch folder lies: an ordinary folder, or one inside a tree the sandbox
    shows read-only (the Python environment; /usr/local is another), where only the
    batch folder's own mask keeps the neighbours' logs and the key out of sight."""
    if request.param == "tmp":
        yield tmp_path / "b"
        return
    out = Path(sys.prefix) / f"mlra-test-batch-{os.getpid()}-{threading.get_ident()}"
    yield out
    shutil.rmtree(out, ignore_errors=True)


@pytest.mark.skipif(_bwrap_problem() is not None, reason=_bwrap_problem() or "")
def test_a_batch_run_reaches_neither_its_neighbour_nor_the_key(
    tmp_path: Path, answer_task: Path, batch_out: Path
) -> None:
    """Two runs of one batch side by side (root, default isolation): each agent knows the
    batch folder's host path and tries its key, its runs folder and every folder above
    its workspace; neither learns the key or the other's id, and both still score."""
    (tmp_path / "answer_task").symlink_to(answer_task)
    out = batch_out
    probe = (
        f"cat {out}/{KEY_FILE}; ls -a {out} {out}/runs {out}/logs; ls -a .. ../.. ../../..; "
        f"ls /proc/*/cwd/..; find / -name '{KEY_FILE}*' -not -path '/proc/*' 2>/dev/null; "
        "echo 42 > answer.txt"
    )
    script = {
        "supervisor:fallback": supervisor_fallback(),
        "worker:fallback": turn(
            "Looking around.", call("bash", command=probe), call("report", summary="done")
        ),
    }
    with ScriptedModelServer(script) as server:
        args = ["batch", "--tasks", "answer_task", "--models", MODEL, "--seeds", "2"]
        args += ["--out", str(out), "--base-url", server.url_for("openai"), "--no-tui"]  # type: ignore[list-item]
        proc = mlra_cli(args, cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    key = (out / KEY_FILE).read_text().strip()
    ids = [batch_run_id(out, MODEL, seed) for seed in (1, 2)]
    for mine, theirs in (ids, ids[::-1]):
        run_dir = out / "runs" / mine
        result = json.loads((run_dir / "result.json").read_text())
        assert result["score"] == 1.0
        events = (run_dir / "events.jsonl").read_text()
        assert '"isolation":"bwrap"' in events.replace(" ", "")
        assert "ls -a" in events  # the probe ran
        seen = events + (out / "logs" / f"{mine}.log").read_text()
        assert key not in seen and key[:16] not in seen
        assert theirs not in seen and theirs.rsplit("-", 1)[1] not in seen
