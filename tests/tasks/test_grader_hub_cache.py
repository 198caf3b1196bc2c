"""A network task's grading and the shared Hugging Face Hub cache (as root): the grader
downloads into a cache of its own (an overlay of the shared one, grader_user.py and
cache_overlay.py), and the shared cache is the same, byte for byte and owner for owner,
after the grading as before it, whatever the grader wrote, renamed or removed."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlra.tasks.evaluators import cache_overlay
from mlra.tasks.evaluators.base import run_evaluation
from mlra.tasks.evaluators.grader_user import Mirrors
from mlra.tasks.spec import load_task
from mlra.tools.sandbox.bwrap import isolation_problem
from tests.conftest import ANSWER_TASK

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


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder any user may enter (the grader's uid reaches the cache through it)."""
    made = Path(tempfile.mkdtemp(prefix="mlra-hub-cache-", dir="/var/tmp"))
    made.chmod(0o755)
    yield made
    cache_overlay.detach_under(made)
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
    task_dir = base / "task"
    shutil.copytree(ANSWER_TASK, task_dir)
    toml = task_dir / "task.toml"
    text = toml.read_text().replace('"answer.txt"', '"answer.py"')
    toml.write_text(text.replace("network = false", "network = true"))
    home = base / name
    _shared_cache(home)
    before = _tree(home)
    consts = (
        f"OLD, NEW, BLOB, SHARED = {OLD!r}, {NEW!r}, {_sha(CACHED)!r}, {str(home)!r}\n"
        f"CACHED, UPDATED, FRESH = {CACHED!r}, {UPDATED!r}, {FRESH!r}\n"
    )
    (task_dir / "hidden" / "check.py").write_text(consts + CHECK)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    for switch in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(switch, raising=False)  # the suite's; a user's host has none
    answer = base / "frozen" / "answer.py"
    answer.parent.mkdir()
    answer.write_text("")
    work = base / "evaluation"
    outcome = await run_evaluation(load_task(task_dir), answer, work)
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
