"""A network task's grading and the shared Hugging Face Hub cache (as root): the grader
downloads into a cache of its own (an overlay of the shared one, grader_user.py and
cache_overlay.py), and the shared cache is the same, byte for byte and owner for owner,
after the grading as before it, whatever the grader wrote, renamed or removed."""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Iterator
from pathlib import Path

import pytest

from mlra.tasks.evaluators import cache_overlay
from mlra.tasks.evaluators.base import run_evaluation
from mlra.tasks.evaluators.grader_user import Mirrors
from mlra.tasks.spec import TaskSpec, load_task
from mlra.tools.sandbox import start_step, trees
from mlra.tools.sandbox.bwrap import isolation_problem
from mlra.tools.sandbox.runner import finish_despite_cancel
from tests.conftest import answer_copy

PROBLEM = "the grader's uid needs root" if os.geteuid() != 0 else isolation_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")

OLD, NEW = "a" * 40, "b" * 40
"""The commit the shared cache holds for `org/cached`, and the one the Hub has now."""
CACHED = b'{"cached": true}\n'
UPDATED = b'{"cached": false}\n'
FRESH = b"fresh weights\n"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _shared_cache(home: Path) -> None:
    """A Hub cache as huggingface_hub leaves it (root's): one repository's blob, its
    snapshot link and ref, the lock its download left, and a folder others may not enter."""
    repo = home / "hub" / "models--org--cached"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "snapshots" / OLD).mkdir(parents=True)
    (repo / "blobs" / _sha(CACHED)).write_bytes(CACHED)
    (repo / "snapshots" / OLD / "config.json").symlink_to(f"../../blobs/{_sha(CACHED)}")
    (repo / "refs" / "main").write_text(OLD)
    locks = home / "hub" / ".locks" / "models--org--cached"
    locks.mkdir(parents=True)
    (locks / f"{_sha(CACHED)}.lock").touch(0o644)
    closed = home / "hub" / "closed"
    closed.mkdir(mode=0o700)
    (closed / "secret.txt").write_text("root's own\n")


def _tree(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry below `root`: kind, mode, owner, and its bytes or link target."""
    found: dict[str, tuple[object, ...]] = {}
    for path in sorted([root, *root.rglob("*")]):
        st = path.lstat()
        if path.is_symlink():
            what: object = os.readlink(path)
        elif path.is_dir():
            what = "dir"
        else:
            what = path.read_bytes()
        found[str(path.relative_to(root))] = (st.st_mode, st.st_uid, st.st_gid, what)
    return found


HUB = """
import hashlib, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
def sha(data):
    return hashlib.sha256(data).hexdigest()
class Hub(BaseHTTPRequestHandler):
    # the Hub's resolve route: org/cached now at NEW, org/fresh not in the shared cache
    files = {
        "/org/cached/resolve/main/config.json": (NEW, UPDATED),
        "/org/fresh/resolve/main/weights.bin": (NEW, FRESH),
    }
    def do_HEAD(self):
        self.answer(False)
    def do_GET(self):
        self.answer(True)
    def answer(self, body):
        commit, data = self.files.get(self.path.split("?")[0], (None, b""))
        self.send_response(200 if commit else 404)
        if commit:
            self.send_header("X-Repo-Commit", commit)
            self.send_header("ETag", '"' + sha(data) + '"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)  # in the sandbox's own network
threading.Thread(target=server.serve_forever, daemon=True).start()
os.environ["HF_ENDPOINT"] = f"http://127.0.0.1:{server.server_address[1]}"
"""

CHECK = (
    """
import json, os, sys
from pathlib import Path
artifact, root, out = (Path(a) for a in sys.argv[1:4])
"""
    + HUB
    + """
from huggingface_hub import hf_hub_download
hub = Path(os.environ["HF_HOME"]) / "hub"
repo = hub / "models--org--cached"
said = {"read_cache": float((repo / "snapshots" / OLD / "config.json").read_bytes() == CACHED)}
said["overlaid"] = float(os.path.ismount(hub))  # else mirrored, entry by entry
# huggingface_hub downloads into the grader's cache: a cached repository moved on (its
# ref replaced, a lock of root's left there), and one the shared cache has not
said["updated"] = float(Path(hf_hub_download("org/cached", "config.json")).read_bytes() == UPDATED)
said["fresh"] = float(Path(hf_hub_download("org/fresh", "weights.bin")).read_bytes() == FRESH)
said["ref_moved"] = float((repo / "refs" / "main").read_text() == NEW)
for name, act in {
    "wrote_blob": lambda: (repo / "blobs" / BLOB).write_bytes(b"poisoned"),
    "chmod_blob": lambda: os.chmod(repo / "blobs" / BLOB, 0o666),
    "read_closed": lambda: (hub / "closed" / "secret.txt").read_text(),
    "wrote_shared": lambda: (Path(SHARED) / "hub" / "mine.txt").write_text("x"),
}.items():
    try:
        act()
        said[name] = 1.0
    except OSError:
        said[name] = 0.0
fresh = next((hub / "models--org--fresh" / "blobs").iterdir())
os.replace(fresh, repo / "blobs" / BLOB)  # a cached blob replaced in its own view
said["replaced_own"] = float((repo / "blobs" / BLOB).read_bytes() == FRESH)
out.write_text(json.dumps({"score": 1.0, "metrics": said}))
"""
)


def _unmount_below(folder: Path) -> None:
    """What a test left mounted in its own folder (its paths the test's, not a grader's)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for point in cache_overlay.mounts():
        if point.startswith(f"{folder}/"):
            libc.umount2(point.encode(), cache_overlay.MNT_DETACH)


def _network_task(
    base: Path, monkeypatch: pytest.MonkeyPatch, home: Path, check: str
) -> tuple[TaskSpec, Path]:
    """A network task whose checker is `check` (the constants above given), the shared
    cache at `home` as this host's HF_HOME, and the artifact it grades."""
    task_dir = answer_copy(
        base / "task", ('"answer.txt"', '"answer.py"'), ("network = false", "network = true")
    )
    _shared_cache(home)
    consts = (
        f"OLD, NEW, BLOB, SHARED = {OLD!r}, {NEW!r}, {_sha(CACHED)!r}, {str(home)!r}\n"
        f"CACHED, UPDATED, FRESH = {CACHED!r}, {UPDATED!r}, {FRESH!r}\n"
    )
    (task_dir / "hidden" / "check.py").write_text(consts + check)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    for switch in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(switch, raising=False)  # the suite's; a user's host has none
    answer = base / "frozen" / "answer.py"
    answer.parent.mkdir()
    answer.write_text("")
    return load_task(task_dir), answer


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder any user may enter (the grader's uid reaches the cache through it)."""
    made = Path(tempfile.mkdtemp(prefix="mlra-grader-cache-", dir="/var/tmp"))
    made.chmod(0o755)
    yield made
    _unmount_below(made)
    shutil.rmtree(made, ignore_errors=True)


@pytest.mark.parametrize(
    ("name", "overlaid"), [("hf", 1.0), ("hf:cache", 0.0)], ids=["overlay", "mirror"]
)
async def test_a_network_grading_downloads_into_its_own_cache_never_the_shared_one(
    base: Path, monkeypatch: pytest.MonkeyPatch, name: str, overlaid: float
) -> None:
    """A network task's grader, in its sandbox as a uid of its own, runs huggingface_hub
    against a Hub (on its own loopback): a cached repository moved on is fetched again
    (its ref replaced, past root's stale lock) and a new one downloaded, into the
    grader's cache, and a cached blob replaced in its own view; a shared blob it cannot
    write or chmod, a closed folder of the cache it cannot read, the shared cache's own
    path it cannot write. After the grading the shared cache is the same, entry for
    entry, and the grader's layer is gone, no mount left. So where the cache is an overlay
    and where it cannot be (a path overlayfs's options cannot carry: mirrored)."""
    home = base / name
    task, answer = _network_task(base, monkeypatch, home, CHECK)
    before = _tree(home)
    work = base / "evaluation"
    outcome = await run_evaluation(task, answer, work)
    assert outcome.ok, outcome.error
    assert outcome.details["isolation"] == "bwrap"
    assert outcome.metrics == {
        "read_cache": 1.0,
        "overlaid": overlaid,
        "updated": 1.0,
        "fresh": 1.0,
        "ref_moved": 1.0,
        "wrote_blob": 0.0,
        "chmod_blob": 0.0,
        "read_closed": 0.0,
        "wrote_shared": 0.0,
        "replaced_own": 1.0,
    }
    assert _tree(home) == before
    assert not (work / "hf-caches").exists()
    assert not [m for m in cache_overlay.mounts() if m.startswith(f"{base}/")]


def test_a_killed_graders_overlay_is_detached_by_the_next_grading(base: Path) -> None:
    """An mlra killed mid-grading leaves its overlay mounted in the scratch folder: the
    next grading there detaches it before removing the grader's layer, and the shared
    cache under it is untouched."""
    home = base / "hf"
    _shared_cache(home)
    before = _tree(home)
    work = base / "evaluation"
    work.mkdir()
    left = Mirrors.plan({"HF_HOME": str(home)}, work)  # the Hub online
    left.build(None)
    assert left.overlaid and os.path.ismount(left.overlaid[0])
    (left.overlaid[0] / "models--org--cached" / "blobs" / "mine").write_text("left")
    again = Mirrors.plan({"HF_HOME": str(home)}, work)  # the next grading
    assert not [m for m in cache_overlay.mounts() if m.startswith(f"{base}/")]
    assert not (work / "hf-caches").exists()
    assert _tree(home) == before
    again.remove()


def _tmpfs(at: Path) -> None:
    at.mkdir(parents=True)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mount(b"tmpfs", str(at).encode(), b"tmpfs", 0, b"size=1m") == 0
    (at / "kept.txt").write_text("the host's\n")


SWAP = """
import json, os, sys
from pathlib import Path
artifact, root, out = (Path(a) for a in sys.argv[1:4])
home = Path(os.environ["HF_HOME"])
scratch = home.parent.parent  # HF_HOME is hf-caches/hf_home in the scratch folder
said = {"overlaid": float(os.path.ismount(home / "hub"))}
# the overlay's folder moved out of hf-caches, elsewhere in the scratch folder; then
# hf-caches itself (it holds mlra's closed .overlays: moved, not removed) replaced by a
# link to a host folder that holds a mount of its own
os.rename(home, scratch / "elsewhere")
said["moved"] = float(os.path.ismount(scratch / "elsewhere" / "hub"))
os.rename(scratch / "hf-caches", scratch / "old-caches")
os.symlink(VICTIM, scratch / "hf-caches")
out.write_text(json.dumps({"score": 1.0, "metrics": said}))
"""


@pytest.mark.parametrize("disk_mb", [None, 0], ids=["volume", "no-volume"])
async def test_a_grader_that_links_or_moves_its_caches_detaches_nothing_else_and_keeps_no_overlay(
    base: Path, monkeypatch: pytest.MonkeyPatch, disk_mb: int | None
) -> None:
    """The grader moves its Hub overlay's folder elsewhere in its scratch folder and
    replaces `hf-caches` with a link to a host folder holding a mount (here the test's
    tmpfs; on a host, /sys and its cgroup tree). After the grading that mount is still
    there, untouched, and the overlay is detached where it was moved, so neither the
    scratch folder's volume (carried back) nor the run folder (no volume: the scratch
    folder is the run folder) keeps the shared cache."""
    home = base / "hf"
    victim = base / "victim"
    _tmpfs(victim / "mnt")
    task, answer = _network_task(base, monkeypatch, home, f"VICTIM = {str(victim)!r}\n" + SWAP)
    before = _tree(home)
    work = base / "evaluation"
    outcome = await run_evaluation(task, answer, work, disk_mb=disk_mb)
    assert outcome.ok, outcome.error
    assert outcome.metrics == {"overlaid": 1.0, "moved": 1.0}
    assert os.path.ismount(victim / "mnt")
    assert (victim / "mnt" / "kept.txt").read_text() == "the host's\n"
    assert not cache_overlay.tagged(cache_overlay.tags_for(work))
    assert [m for m in cache_overlay.mounts() if m.startswith(f"{base}/")] == [str(victim / "mnt")]
    assert not (work / "hf-caches").exists() and not (work / "hf-caches").is_symlink()
    blob = work / "elsewhere" / "hub" / "models--org--cached" / "blobs" / _sha(CACHED)
    assert not blob.exists()  # the shared cache not left in, nor carried into, the run folder
    assert _tree(home) == before


async def test_a_grading_stopped_as_its_caches_are_made_leaves_no_overlay(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt stopped mid-validation cancels its grading while the grader's caches
    are made (in a thread): the cancellation waits for them and undoes them, so no overlay
    is mounted after the grading's cleanup, and the artifact is mlra's again. The making
    is held until the cancellation has reached the grading (start_step's wait for it),
    or, where nothing waits, until the cancelled grading has ended."""
    task, answer = _network_task(base, monkeypatch, base / "hf", CHECK)
    work = base / "evaluation"
    entered, release, built = threading.Event(), threading.Event(), threading.Event()
    build = Mirrors.build

    def held_build(self: Mirrors, owner: int | None, stop: threading.Event | None = None) -> None:
        entered.set()
        release.wait(timeout=120)
        try:
            build(self, owner, stop)
        finally:
            built.set()

    def waited(aw: Awaitable[None]) -> Awaitable[None]:
        release.set()  # the cancellation waits for the making now: let it go on
        return finish_despite_cancel(aw)

    monkeypatch.setattr(Mirrors, "build", held_build)
    monkeypatch.setattr(start_step, "finish_despite_cancel", waited)
    grading = asyncio.ensure_future(run_evaluation(task, answer, work))
    assert await asyncio.to_thread(entered.wait, 120)
    grading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await grading
    release.set()  # where the grading did not wait, its caches are made only now
    assert await asyncio.to_thread(built.wait, 120)
    assert not cache_overlay.tagged(cache_overlay.tags_for(work))
    assert not [m for m in cache_overlay.mounts() if m.startswith(f"{base}/")]
    assert not (work / "hf-caches").exists()
    assert answer.stat().st_uid == os.geteuid()


def test_an_overlay_moved_deeper_than_a_path_can_name_is_still_detached(base: Path) -> None:
    """The grader may move its Hub cache's folder under 50 folders of 100 characters (a
    path the kernel will not take whole): the next grading there still detaches the
    overlay, walking to it a folder at a time, and removes what the grader left."""
    home = base / "hf"
    _shared_cache(home)
    work = base / "evaluation"
    work.mkdir()
    left = Mirrors.plan({"HF_HOME": str(home)}, work)
    left.build(None)
    fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(50):
        os.mkdir("d" * 100, dir_fd=fd)
        deeper = os.open("d" * 100, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = deeper
    os.rename(left.root / "hf_home", "hf_home", dst_dir_fd=fd)
    os.close(fd)
    ((_, point),) = cache_overlay.tagged(left.tags)
    assert len(point) > os.pathconf("/", "PC_PATH_MAX")
    Mirrors.plan({"HF_HOME": str(home)}, work).remove()  # the next grading
    assert not cache_overlay.tagged(left.tags)
    assert not [m for m in cache_overlay.mounts() if m.startswith(f"{base}/")]
    trees.remove_tree(work / ("d" * 100))
