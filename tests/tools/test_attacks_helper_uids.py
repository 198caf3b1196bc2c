"""What mlra runs for the agent outside its sandbox is confined as the agent is: as root,
the grader's sandbox (the submission's code runs there: a model's custom code, a
tokenizer that executes) and each fetch step (git on a hostile repository, the PDF
reader) run as a host uid claimed for them, never root's or uid 1000's outside.

Each attack takes every inotify instance it can (root's `inotify_init` must still work
meanwhile), reads a root-only file in a folder it is shown, and writes what it can;
assertions are on what the host sees, and on the claims being given back.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlra.tasks.evaluators.base import run_evaluation
from mlra.tasks.spec import load_task
from mlra.tools.sandbox import run_uid
from mlra.tools.sandbox.bwrap import isolation_problem
from mlra.tools.sandbox.env import shown_interpreter
from tests.conftest import answer_copy

PROBLEM = "these attacks need mlra to run as root" if os.geteuid() != 0 else isolation_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")

HOG = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
held = []
while True:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    held.append(fd)
"""

ATTACK = (
    HOG
    + """
import os, time
from pathlib import Path
from typing import Any
def attack(here, shown):
    (here / "held").write_text(str(len(held)))
    while not (here / "go").exists():
        time.sleep(0.05)
    try:
        said = (shown / "roots-only").read_text()
    except OSError as exc:
        said = f"refused: {exc.strerror}"
    (here / "made").write_text(said)
    return said
"""
)


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A run folder as mlra makes it (0700, root's), outside /tmp, with a folder beside
    it that holds a root-only file among readable ones."""
    root = Path(tempfile.mkdtemp(prefix="mlra-helper-uid-", dir="/var/tmp"))
    os.chmod(root, 0o700)
    shown = Path(f"{root}-shown")
    shown.mkdir(mode=0o755)
    (shown / "roots-only").write_text("root-only-canary\n")
    (shown / "roots-only").chmod(0o600)
    yield root
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(shown, ignore_errors=True)


def _shown(run_dir: Path) -> Path:
    return Path(f"{run_dir}-shown")


async def _while_it_holds(here: Path, running: asyncio.Future[Any]) -> int:
    """Once the attack holds every inotify instance it could: root's `inotify_init` still
    works, and the host uid of what the attack wrote, which is let go on."""
    while not (here / "held").exists():
        assert not running.done(), running.result()
        await asyncio.sleep(0.05)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    assert fd >= 0, f"root's inotify_init failed: errno {ctypes.get_errno()}"
    os.close(fd)
    uid = (here / "held").stat().st_uid
    assert str(uid) in {p.name for p in run_uid.CLAIMS_DIRS[0].iterdir()}  # claimed
    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    if limit < 10_000:  # the per-user limit stopped it, all of its own
        assert int((here / "held").read_text()) == limit
    (here / "go").touch()
    return uid


def _a_uid_of_its_own_now_free(uid: int) -> None:
    assert uid not in (0, 1000)
    with pytest.raises(KeyError):
        pwd.getpwuid(uid)
    assert str(uid) not in {p.name for p in run_uid.CLAIMS_DIRS[0].iterdir()}


async def test_a_hostile_fetch_step_runs_as_a_uid_of_its_own(run_dir: Path) -> None:
    """What a clone or a PDF read runs (here: the attack itself) holds its own uid's
    inotify instances, reads no root-only file it is shown, and leaves mlra's files."""
    from mlra.tools.fetch.box import FetchBox, confinement

    staging = run_dir / ".fetch-x"
    staging.mkdir(mode=0o700)
    shown = _shown(run_dir)
    box = FetchBox(staging, bwrap=confinement(allow_unconfined=False), read_only=[shown])
    script = ATTACK + f"print(attack(Path('/workspace'), Path({str(shown)!r})))\n"
    running = asyncio.ensure_future(
        box.run([shown_interpreter(), "-I", "-c", script], timeout_s=120)
    )
    uid = await _while_it_holds(staging, running)
    result = await running
    assert result.exit_code == 0, result.stderr
    assert "root-only-canary" not in result.stdout.decode()
    assert (staging / "made").read_text().startswith("refused: Permission denied")
    _a_uid_of_its_own_now_free(uid)
    # What it left is mlra's again, to be handed to the workspace's owner as it lands.
    assert {p.stat().st_uid for p in staging.iterdir()} == {0}


CHECK = (
    ATTACK
    + """
import json, sys
artifact, root, out = (Path(a) for a in sys.argv[1:4])
said = attack(out.parent, Path(os.environ["HF_HOME"]) / "hub")  # the shared cache's
exec(compile(artifact.read_text(), str(artifact), "exec"))  # the submission's own code
out.write_text(json.dumps({"score": 1.0, "metrics": {
    "read_root_only": float("canary" in said), **metrics}}))
"""
)

SUBMISSION = """
hub = Path(os.environ["HF_HOME"]) / "hub"
metrics = {"read_cache": float((hub / "model.txt").read_text() == "shared\\n")}
try:
    (hub / "model.txt").write_text("poisoned")
    metrics["poisoned"] = 1.0
except OSError:
    metrics["poisoned"] = 0.0
(hub.parent / "mine.txt").write_text("its own")  # into its own cache
try:  # offline, the Hub's cache is the shared one, read-only: no mirror to write into
    (hub / "mine.txt").write_text("its own")
    metrics["wrote_hub"] = 1.0
except OSError:
    metrics["wrote_hub"] = 0.0
metrics["read_token"] = 0.0
for home in (hub.parent, Path(SHARED_DATASETS).parent):  # its own cache; the shared one
    try:
        metrics["read_token"] += float("hf_" in (home / "token").read_text())
    except OSError:
        pass
try:  # the shared datasets cache inside HF_HOME, as the host has it (world-writable)
    (Path(SHARED_DATASETS) / "poison.arrow").write_text("poisoned")
    metrics["poisoned_datasets"] = 1.0
except OSError:
    metrics["poisoned_datasets"] = 0.0
"""


async def test_a_submission_the_grader_runs_is_confined_as_the_agent(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grader's sandbox runs as a uid of its own: the submission's code holds that
    uid's inotify instances, reads no root-only file of the shared cache it is shown (the
    task's own files it reads whatever their mode: test_grader_sandbox.py), and reads the
    shared Hugging Face cache through its own mirror, which it may write but the cache
    not (offline, the Hub's part of it not even its mirror: it reads it as it is)."""
    task_dir = answer_copy(
        run_dir / "task", ('"answer.txt"', '"answer.py"'), files={"hidden/check.py": CHECK}
    )
    hf = _shown(run_dir) / "hf"
    (hf / "hub").mkdir(parents=True)
    (hf / "hub" / "model.txt").write_text("shared\n")
    shutil.copy(_shown(run_dir) / "roots-only", hf / "hub" / "roots-only")  # 0600, root's
    (hf / "token").write_text("hf_secret\n")
    (hf / "token").chmod(0o644)  # as huggingface_hub leaves it
    monkeypatch.setenv("HF_HOME", str(hf))
    datasets = hf / "datasets"  # a cache inside another, left writable by all
    datasets.mkdir(mode=0o777)
    datasets.chmod(0o777)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(datasets))
    answer = run_dir / "frozen" / "answer.py"
    answer.parent.mkdir()
    answer.write_text(f"SHARED_DATASETS = {str(datasets)!r}\n" + SUBMISSION)
    answer.chmod(0o600)  # left so by the agent: the grader still reads it
    work = run_dir / "evaluation"
    task = load_task(task_dir)
    running = asyncio.ensure_future(run_evaluation(task, answer, work))
    uid = await _while_it_holds(work / "script", running)  # the script's folder
    outcome = await running
    assert outcome.ok, outcome.error
    assert outcome.details["isolation"] == "bwrap"
    assert outcome.metrics == {
        "read_root_only": 0.0,
        "read_cache": 1.0,
        "poisoned": 0.0,
        "read_token": 0.0,
        "poisoned_datasets": 0.0,
        "wrote_hub": 0.0,
    }
    assert (work / "script" / "made").stat().st_uid == uid
    _a_uid_of_its_own_now_free(uid)
    assert (hf / "hub" / "model.txt").read_text() == "shared\n"
    assert not (hf / "mine.txt").exists() and not (hf / "hub" / "mine.txt").exists()
    assert not (datasets / "poison.arrow").exists()
    assert not (work / "hf-caches").exists()  # its own cache is gone with it
    assert answer.stat().st_uid == 0  # the frozen copy is mlra's again
