"""A grading and the shared Hugging Face datasets cache (as root): the grader loads a
dataset the shared cache has prepared, past the locks root's preparation left, and
datasets writes what it writes as it loads (its locks, a `map`'s arrow cache) into the
grader's own cache (an overlay of the shared one, grader_user.py and cache_overlay.py);
the shared cache is the same, byte for byte and owner for owner, after the grading."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlra.tasks.evaluators import cache_overlay
from mlra.tasks.evaluators.base import run_evaluation
from mlra.tasks.spec import load_task
from mlra.tools.sandbox.bwrap import isolation_problem
from tests.conftest import answer_copy
from tests.tasks.test_grader_hub_cache import _tree, base

PROBLEM = "the grader's uid needs root" if os.geteuid() != 0 else isolation_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")
__all__ = ["base"]  # the fixture: a folder any user may enter, mounts undone after

CHECK = """
import json, os, sys
from pathlib import Path
artifact, root, out = (Path(a) for a in sys.argv[1:4])
import datasets
cache = Path(datasets.config.HF_DATASETS_CACHE)
said = {"overlaid": float(os.path.ismount(cache))}  # else mirrored, entry by entry
ds = datasets.load_dataset("json", data_files=DATA, split="train")  # offline: prepared
shared = {p.name for p in Path(SHARED).rglob("*.arrow")}
said["read_prepared"] = float({Path(f["filename"]).name for f in ds.cache_files} <= shared)
doubled = ds.map(lambda row: {"y": row["x"] * 2})  # its arrow cache beside the dataset
said["mapped"] = float(doubled["y"] == [2, 4, 6])
said["map_cached"] = float(Path(doubled.cache_files[0]["filename"]).name not in shared)
arrow = next(cache.rglob("json-train.arrow"))
for name, act in {
    "wrote_arrow": lambda: arrow.write_bytes(b"poisoned"),
    "chmod_arrow": lambda: os.chmod(arrow, 0o666),
    "wrote_shared": lambda: (Path(SHARED) / "mine.txt").write_text("x"),
}.items():
    try:
        act()
        said[name] = 1.0
    except OSError:
        said[name] = 0.0
arrow.unlink()  # its own view's
said["removed_own"] = float(not arrow.exists())
out.write_text(json.dumps({"score": 1.0, "metrics": said}))
"""


@pytest.mark.parametrize(
    ("cache", "overlaid"),
    [("hf/datasets", 1.0), ("datasets", 1.0), ("hf:x/datasets", 0.0)],
    ids=["in-hf-home", "its-own", "mirror"],
)
async def test_a_grading_loads_the_shared_datasets_cache_and_never_changes_it(
    base: Path, monkeypatch: pytest.MonkeyPatch, cache: str, overlaid: float
) -> None:
    """An offline grader, as a uid of its own, loads a dataset root prepared in the
    shared datasets cache (root's locks beside it), maps it (an arrow cache written
    beside the dataset) and removes the dataset's arrow file in its own view; a shared
    arrow file it cannot write or chmod, the shared cache's own path it cannot write.
    After the grading the shared cache is the same, entry for entry, and the grader's
    layer is gone, no mount left: so with the cache in HF_HOME, as HF_DATASETS_CACHE of
    its own, and where it cannot be an overlay (mirrored)."""
    import datasets

    task_dir = answer_copy(base / "task", ('"answer.txt"', '"answer.py"'))
    data = task_dir / "rows.jsonl"
    data.write_text("".join(f'{{"x": {x}}}\n' for x in (1, 2, 3)))
    shared = base / cache
    shared.mkdir(parents=True)
    datasets.load_dataset("json", data_files=str(data), split="train", cache_dir=str(shared))
    assert list(shared.rglob("*.lock")), "datasets left no lock: the test proves less"
    before = _tree(shared)
    consts = f"DATA, SHARED = {str(data)!r}, {str(shared)!r}\n"
    (task_dir / "hidden" / "check.py").write_text(consts + CHECK)
    home = shared.parent if cache.endswith("/datasets") else base / "hf"
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HF_HOME", str(home))
    if shared == home / "datasets":
        monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    else:
        monkeypatch.setenv("HF_DATASETS_CACHE", str(shared))
    answer = base / "frozen" / "answer.py"
    answer.parent.mkdir()
    answer.write_text("")
    work = base / "evaluation"
    outcome = await run_evaluation(load_task(task_dir), answer, work)
    assert outcome.ok, outcome.error
    assert outcome.details["isolation"] == "bwrap"
    assert outcome.metrics == {
        "overlaid": overlaid,
        "read_prepared": 1.0,
        "mapped": 1.0,
        "map_cached": 1.0,
        "wrote_arrow": 0.0,
        "chmod_arrow": 0.0,
        "wrote_shared": 0.0,
        "removed_own": 1.0,
    }
    assert _tree(shared) == before
    assert not (work / "hf-caches").exists()
    assert not [m for m in cache_overlay.mounts() if m.startswith(f"{base}/")]
