"""A grading stopped before its grader runs (an attempt stopped mid-validation, as root)
leaves nothing it made: not the grader's cache overlays (mounted in a thread that may
outlast the grading's own wait for it), not the copies of the task's hidden files; and
each overlay says in its mount source what it holds (cache_overlay.tag_for)."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections.abc import Awaitable
from pathlib import Path

import pytest

from mlra.tasks.evaluators import cache_overlay, grader_user
from mlra.tasks.evaluators.base import run_evaluation
from mlra.tasks.evaluators.grader_files import TaskCopies
from mlra.tasks.evaluators.grader_user import Mirrors
from mlra.tasks.spec import load_task
from mlra.tools.sandbox import start_step
from mlra.tools.sandbox.bwrap import isolation_problem
from mlra.tools.sandbox.local import LocalSandbox
from mlra.tools.sandbox.runner import finish_despite_cancel
from mlra.tools.sandbox.volume_users import mountinfo, source_fields, unescape
from tests.conftest import ANSWER_TASK
from tests.tasks.test_grader_hub_cache import CHECK, _network_task, _tree, base

PROBLEM = "the grader's uid needs root" if os.geteuid() != 0 else isolation_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")
WAIT_S = 120.0
__all__ = ["base"]


def _sources_below(folder: Path) -> dict[str, str]:
    """Where an overlay is mounted below `folder` -> its mount source (what findmnt shows)."""
    found = {}
    for fields in mountinfo():
        point, rest = unescape(fields[4]), source_fields(fields)
        if point.startswith(f"{folder}/") and len(rest) > 1 and rest[0] == "overlay":
            found[point] = unescape(rest[1])
    return found


async def test_a_grading_stopped_as_a_slow_cache_walk_runs_closes_its_sandbox_only_after(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grader's caches are made in a thread that outlasts the grading's wait for it (a
    walk past HAND_WAIT_S that does not stop when told): the grader's sandbox closes (its
    scratch folder carried off its volume, its uid given back) only once that walk has
    ended and its overlays are detached, and nothing of them is left after."""
    task, answer = _network_task(base, monkeypatch, base / "hf", CHECK)
    (base / "hf" / "datasets").mkdir()
    work = base / "evaluation"
    monkeypatch.setattr(grader_user, "HAND_WAIT_S", 0.01)
    entered, release, built = threading.Event(), threading.Event(), threading.Event()
    build = Mirrors.build

    def slow_build(self: Mirrors, owner: int | None, stop: threading.Event | None = None) -> None:
        entered.set()
        while not release.wait(0.05):  # until told to stop, or (unwaited) the close began
            if stop is not None and stop.is_set():
                break
        try:
            build(self, owner)  # stop not heard: it mounts both overlays all the same
        finally:
            built.set()

    at_close: list[tuple[bool, list[tuple[int, str]]]] = []
    close = LocalSandbox.close

    async def watched_close(self: LocalSandbox) -> None:
        at_close.append((built.is_set(), cache_overlay.tagged(cache_overlay.tags_for(work))))
        release.set()
        await close(self)

    monkeypatch.setattr(Mirrors, "build", slow_build)
    monkeypatch.setattr(LocalSandbox, "close", watched_close)
    grading = asyncio.ensure_future(run_evaluation(task, answer, work))
    assert await asyncio.to_thread(entered.wait, WAIT_S)
    grading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await grading
    release.set()
    await asyncio.get_running_loop().shutdown_default_executor()  # an unwaited walk's end
    assert at_close == [(True, [])]  # the walk ended and was undone before the close
    assert not cache_overlay.tagged(cache_overlay.tags_for(work))
    assert not _sources_below(base)
    assert not (work / "hf-caches").exists()
    assert answer.stat().st_uid == os.geteuid()


async def test_a_grading_stopped_as_the_task_files_are_copied_leaves_no_copy(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's hidden answers the grader's uid could not read are copied for it, readable
    by all, before its sandbox starts: a grading stopped meanwhile stops the copy and
    removes what was copied before the stop goes on."""
    task_dir = base / "task"
    shutil.copytree(ANSWER_TASK, task_dir)
    answers = task_dir / "hidden" / "answers"
    answers.mkdir(mode=0o700)
    for n in range(20):
        (answers / f"{n}.txt").write_text(f"answer {n}\n")
    task = load_task(task_dir)
    answer = base / "frozen" / "answer.txt"
    answer.parent.mkdir()
    answer.write_text("42\n")
    work = base / "evaluation"
    folder = TaskCopies(work.with_name(f"{work.name}-task-files")).folder
    entered, release = threading.Event(), threading.Event()
    copy2 = shutil.copy2
    copies: list[str] = []

    def held_copy(src: str, dst: str, **kwargs: bool) -> object:
        made = copy2(src, dst, **kwargs)
        copies.append(dst)
        entered.set()
        assert release.wait(WAIT_S)
        return made

    def waited(aw: Awaitable[None]) -> Awaitable[None]:
        release.set()  # the cancellation waits for the copy now: let it go on
        return finish_despite_cancel(aw)

    monkeypatch.setattr(shutil, "copy2", held_copy)
    monkeypatch.setattr(start_step, "finish_despite_cancel", waited)
    grading = asyncio.ensure_future(run_evaluation(task, answer, work))
    assert await asyncio.to_thread(entered.wait, WAIT_S)
    assert Path(copies[0]).read_text().startswith("answer")
    grading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await grading
    release.set()  # where the grading did not wait, the copy goes on only now
    await asyncio.get_running_loop().shutdown_default_executor()
    assert not folder.exists()
    assert len(copies) == 1  # told to stop: no file copied after


def test_each_overlay_is_named_for_the_cache_it_holds_and_an_older_tag_is_detached(
    base: Path,
) -> None:
    """`findmnt` names the Hub's overlay `mlra-hub-...` and datasets' `mlra-datasets-...`;
    an overlay an older mlra left (every one tagged `mlra-hub-`) is detached by the next
    grading in that folder like the grading's own."""
    home = base / "hf"
    for name in ("hub", "datasets"):
        (home / name / "x").mkdir(parents=True)
    work = base / "evaluation"
    work.mkdir()
    mirrors = Mirrors.plan({"HF_HOME": str(home)}, work)  # the Hub online
    mirrors.build(None)
    shown = mirrors.root / "hf_home"
    assert _sources_below(base) == {
        str(shown / "hub"): cache_overlay.tag_for(work, "hub"),
        str(shown / "datasets"): cache_overlay.tag_for(work, "datasets"),
    }
    assert cache_overlay.tag_for(work, "datasets").startswith("mlra-datasets-")
    mirrors.remove()
    assert not _sources_below(base)
    before = _tree(home)
    old = "mlra-hub-" + cache_overlay.tag_for(work, "datasets").removeprefix("mlra-datasets-")
    state, target = base / "old-layers" / "d", work / "old-datasets"
    state.parent.mkdir()
    assert cache_overlay.overlay(home / "datasets", target, state, None, old, lock_files=True)
    assert _sources_below(base) == {str(target): old}
    Mirrors.plan({"HF_HOME": str(home)}, work).remove()  # the next grading
    assert not _sources_below(base)
    assert _tree(home) == before
