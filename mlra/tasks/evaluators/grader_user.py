"""What the grader's own uid needs: the caches it may write, the artifact it reads, the
disk it may fill, and what mlra writes after it in a folder that uid held.

As root the grader's sandbox runs as a host uid claimed for it (tools/sandbox/run_uid.py),
as the agent's does: the submission's code (a model's, a tokenizer's) runs in it, so its
inotify instances, processes and files are that uid's, not root's, and it reads no
root-only file of what it is shown. The shared Hugging Face cache is root's, so it is
shown read-only, and the grader is given a cache of its own in its scratch folder: the
datasets cache, and the Hub's where the grading has the network, each an overlay whose
upper layer is the grader's (cache_overlay.py); the Hub's offline linked whole (read-only,
as huggingface_hub reads an offline cache without writing); the small rest mirrored, a
folder for each of its folders, a link for each of its files. What the grader writes (a
lock, a dataset it prepares, a download) lands in its own folder, under its disk quota,
and a submission cannot change the cache the next grading reads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from mlra.tasks.evaluators import cache_overlay
from mlra.tasks.spec import TaskSpec
from mlra.tools.sandbox import run_uid, trees
from mlra.tools.sandbox.default_limits import Chosen, default_disk, disk_for, task_disk
from mlra.tools.sandbox.start_step import Pending, made_or_undone

CACHE_VARS = ("HF_HOME", "HF_DATASETS_CACHE")
MIRRORS = "hf-caches"
"""In the grader's scratch folder: its own Hugging Face caches (`Mirrors`)."""
LOCK_SUFFIX = ".lock"
"""Not mirrored: locks are made afresh (a link to root's would not open for writing)."""
HUB_DIRS = frozenset({"hub", "xet"})
"""The Hub's caches in HF_HOME: linked whole where the grading is offline, overlaid where
it has the network (cache_overlay.py); mirrored only where no overlay can be had."""
ITSELF = frozenset({"."})
"""A plan's overlaid folders: the cache itself (HF_DATASETS_CACHE outside HF_HOME)."""
TOKENS = ("token", "stored_tokens")
"""The Hub's tokens (a cache's own files of these names): no grader's business, so not
mirrored, and masked where the cache itself is shown (huggingface_hub writes them
readable by all)."""
HAND_WAIT_S = 60.0
"""How long a grading stopped as the grader's caches are made waits to undo them (their
walk is told to stop, so it is seconds); a walk still going by then undoes them itself
when it ends, and the grader's sandbox closes only after that (`hand_over`'s `pending`)."""
GRADER_DISK_MB = 10 * 1024
"""The grader's scratch quota where the task sets no `disk_gb`: what lm-eval's prepared
datasets and an evaluator's outputs need, never half the disk."""

logger = logging.getLogger(__name__)


def grader_disk(task: TaskSpec, work_dir: Path, asked_mb: int | None = None) -> Chosen:
    """The grader's scratch quota: the run's `--disk` (`asked_mb`; 0: none), else the
    task's `disk_gb`, as for the agent's workspace (agent/setup/run_setup.py
    `limit_choices`), else GRADER_DISK_MB, never more than the default a sandbox gets here."""
    if asked_mb is not None:
        source = "the run's --disk" if asked_mb else "the run's --disk none: no quota"
        return disk_for(asked_mb, source, work_dir)
    if task.resources.disk_gb:
        return task_disk(int(task.resources.disk_gb * 1024), work_dir)
    machine = default_disk(work_dir)
    if machine.mb is not None and machine.mb < GRADER_DISK_MB:
        return machine
    return Chosen(GRADER_DISK_MB, f"the grader's default of {GRADER_DISK_MB // 1024} GiB")


def disk_full_error(disk: Chosen) -> str:
    return (
        f"grading needed more disk than its scratch quota of {disk.mb:,} MB ({disk.source}); "
        "a task whose grading needs more says so with [resources] disk_gb"
    )


@dataclass
class Mirrors:
    """The grader's own Hugging Face caches: `env`'s cache variables, each mirrored in
    `root` (a folder of the scratch folder), the originals to be shown read-only.

    `plan` only decides (before the sandbox starts, no walk); `build` makes the mirror
    in the scratch folder once it is the grader's (its volume mounted, handed to its
    uid), so it is neither carried onto the volume, nor handed over entry by entry, nor
    carried back: it is removed before the sandbox closes (`remove`). The big caches
    are not mirrored. The datasets cache (HF_HOME's `datasets`, or HF_DATASETS_CACHE
    wherever it is) is an overlay of the shared one under an upper layer of the
    grader's (cache_overlay.py), offline or not: datasets writes as it loads. The Hub's
    (`hub`, `xet`) are linked whole where the grading is offline (huggingface_hub reads
    an offline cache without writing to it: no lock, no ref), overlaid where it has the
    network. An overlay costs the cache's folders, not its entries, so the walk is only
    the small rest (`modules`, a few files), whatever the models and datasets."""

    root: Path
    tags: frozenset[str]
    """The mount sources of this work folder's overlays (cache_overlay.tags_for): what
    `remove` detaches, wherever the grader moved them."""
    originals: list[Path] = field(default_factory=list)
    secrets: list[Path] = field(default_factory=list)
    """The caches' token files, masked in the grader's sandbox."""
    relative: dict[str, str] = field(default_factory=dict)
    """Cache variable -> its mirror, relative to the scratch folder."""
    planned: list[tuple[Path, Path, frozenset[str], frozenset[str]]] = field(default_factory=list)
    """(original, its mirror, its top-level folders linked whole, those overlaid;
    `ITSELF`: the original overlaid whole) for `build`."""
    overlaid: list[Path] = field(default_factory=list)
    """Where `build` mounted an overlay (cache_overlay.py), for `remove` to detach."""

    @classmethod
    def plan(cls, env: dict[str, str], work_dir: Path) -> Mirrors:
        made = cls(work_dir / MIRRORS, cache_overlay.tags_for(work_dir))
        made.remove()  # a former grading's (a killed mlra's overlays detached first)
        home = env.get("HF_HOME")
        datasets = _datasets_dirs(env)
        for name in CACHE_VARS:
            value = env.get(name)
            if value is None or not Path(value).is_dir():
                continue
            source = Path(value).resolve()
            under_home = home is not None and name != "HF_HOME" and "HF_HOME" in made.relative
            if under_home and Path(home or "").resolve() in source.parents:
                rel = source.relative_to(Path(home or "").resolve())
                made.relative[name] = f"{made.relative['HF_HOME']}/{rel.as_posix()}"
                continue
            target = made.root / name.lower()
            if name == "HF_HOME":
                whole, over = (HUB_DIRS, datasets) if offline(env) else ((), HUB_DIRS | datasets)
            else:  # a datasets cache of its own
                whole, over = (), ITSELF
            made.planned.append((source, target, frozenset(whole), over))
            made.originals.append(source)
            made.secrets += [source / t for t in TOKENS if (source / t).exists()]
            made.relative[name] = target.relative_to(work_dir).as_posix()
        return made

    def build(self, owner: int | None, stop: threading.Event | None = None) -> None:
        """Make the mirrors, their folders `owner`'s (the grader's uid; None: mlra's); cut
        short once `stop` is set (the grading gave up: `remove` undoes what was made)."""
        if not self.planned:
            return
        stop = stop or threading.Event()
        self.root.mkdir(exist_ok=True)
        _own(str(self.root), owner)
        for source, target, whole, over in self.planned:
            if stop.is_set():
                return
            if over == ITSELF:
                self._overlay(source, target, target.name, owner, "datasets", stop)
                continue
            left = {n for n in over if (source / n).is_dir() and not (source / n).is_symlink()}
            _mirror(str(source), str(target), whole, owner, frozenset(left), stop)
            for name in sorted(left):
                kind = "hub" if name in HUB_DIRS else "datasets"
                self._overlay(
                    source / name, target / name, f"{target.name}-{name}", owner, kind, stop
                )

    def _overlay(
        self,
        source: Path,
        target: Path,
        state: str,
        owner: int | None,
        kind: str,
        stop: threading.Event,
    ) -> None:
        """`source` at `target` as an overlay of `kind` (cache_overlay.KINDS; its layers
        named `state`); where none can be had, mirrored, entry by entry."""
        layers = self.root / cache_overlay.OVERLAYS / state
        tag = cache_overlay.tag_for(self.root.parent, kind)
        lock_files = kind == "datasets"
        if cache_overlay.overlay(
            source, target, layers, owner, tag, lock_files=lock_files, stop=stop
        ):
            self.overlaid.append(target)
        elif not stop.is_set():
            _mirror(str(source), str(target), frozenset(), owner, stop=stop)

    def holds(self, path: Path | str) -> bool:
        """Whether `path` is one of the mirrored caches or inside one."""
        real = Path(path).resolve()
        return any(real == o or o in real.parents for o in self.originals)

    def point(self, env: dict[str, str], inside: str) -> None:
        """Name the mirrors in `env` as the grader sees its scratch folder (`inside`)."""
        for name, rel in self.relative.items():
            env[name] = f"{inside}/{rel}"

    def remove(self) -> None:
        """The overlays detached (the shared caches under them untouched), then the
        grader's own layers and mirrors removed: its folders and what it wrote. Nothing
        here follows a path of the scratch folder, which the grader may have replaced
        with a link: the overlays are found by their tag, and `root` is removed as it
        is (a link as itself)."""
        left = cache_overlay.detach(self.tags)
        if left:  # the removal below goes through it into its upper layer, never the cache
            logger.warning("%d of the grader's cache overlays could not be detached", left)
        self.overlaid.clear()
        trees.remove_tree(self.root, ignore_errors=True)


def _datasets_dirs(env: dict[str, str]) -> frozenset[str]:
    """HF_HOME's folders that are a datasets cache: its `datasets`, and the one that
    holds HF_DATASETS_CACHE where that lies in HF_HOME."""
    found = {"datasets"}
    home, cache = env.get("HF_HOME"), env.get("HF_DATASETS_CACHE")
    if home and cache:
        real_home, real_cache = Path(home).resolve(), Path(cache).resolve()
        if real_home in real_cache.parents:
            found.add(real_cache.relative_to(real_home).parts[0])
    return frozenset(found - HUB_DIRS)


def offline(env: dict[str, str]) -> bool:
    """Whether huggingface_hub runs offline with `env` (as it reads HF_HUB_OFFLINE)."""
    return env.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}


def _own(path: str, owner: int | None) -> None:
    if owner is not None:
        os.lchown(path, owner, owner)


def _mirror(
    source: str,
    target: str,
    whole: frozenset[str],
    owner: int | None,
    leave: frozenset[str] = frozenset(),
    stop: threading.Event | None = None,
) -> None:
    """A folder for each folder of `source` (`owner`'s), a link for each file (a link as
    it is); at the top, the folders named in `whole` one link each, those in `leave` left
    out (overlaid by the caller). Walked with scandir and links made relative to the
    folder's descriptor: one pass, a few system calls an entry; cut short once `stop` is
    set."""
    todo = [(source, target, True)]
    while todo:
        if stop is not None and stop.is_set():
            return
        src, dst, top = todo.pop()
        try:
            os.mkdir(dst)
            _own(dst, owner)
            fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            with os.scandir(src) as entries:
                for entry in entries:
                    name = entry.name
                    with contextlib.suppress(OSError):
                        if entry.is_symlink():
                            os.symlink(os.readlink(entry.path), name, dir_fd=fd)
                        elif entry.is_dir(follow_symlinks=False):
                            if top and name in leave:
                                continue
                            if top and name in whole:
                                os.symlink(entry.path, name, dir_fd=fd)
                            else:
                                todo.append((entry.path, f"{dst}/{name}", False))
                        elif not (name.endswith(LOCK_SUFFIX) or (top and name in TOKENS)):
                            os.symlink(entry.path, name, dir_fd=fd)
        except OSError:
            pass
        finally:
            os.close(fd)


def lend(artifact: Path, uid: int | None) -> None:
    """The frozen artifact (mlra's copy, shown read-only) to the grader's uid, so a file
    the agent left 0600 is still read; `uid` None gives it back to mlra's user."""
    owner = os.geteuid() if uid is None else uid
    group = os.getegid() if uid is None else uid
    if os.geteuid() != 0:
        return
    with contextlib.suppress(OSError):
        if artifact.is_dir() and not artifact.is_symlink():
            run_uid.hand_tree(artifact, owner, group)
        else:
            os.lchown(artifact, owner, group)


async def hand_over(
    artifact: Path, mirrors: Mirrors | None, uid: int | None, pending: Pending
) -> None:
    """The artifact lent to the grader's `uid` and its caches made (`Mirrors.build`), in
    a thread; a grading cancelled meanwhile (an attempt stopped mid-validation) tells the
    walk to stop, waits for it and undoes both before the cancellation goes on
    (start_step.py). Unwaited, the thread went on after the grading's `remove` and
    mounted overlays that no one detached. A walk past HAND_WAIT_S undoes them itself
    when it ends, and `pending` holds it: the grading waits for it before it removes the
    caches and closes the grader's sandbox, so no overlay is mounted in a scratch folder
    being carried off its volume, nor a file chowned to a uid given back."""
    stop = threading.Event()

    def make() -> None:
        lend(artifact, uid)
        if mirrors is not None:  # in the scratch folder as it now is: the grader's
            mirrors.build(uid, stop)

    def undo(_: None) -> None:
        if mirrors is not None:
            mirrors.remove()
        lend(artifact, None)

    await made_or_undone(make, undo, HAND_WAIT_S, pending, stop)


def write_after(path: Path, text: str) -> None:
    """Write a file of the folder the grader held: what its uid left there (a link to a
    host file) is removed first, and the file is made afresh, never through a link."""
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            trees.remove_tree(path, ignore_errors=True)
        else:
            path.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o644)
    with os.fdopen(fd, "w") as out:
        out.write(text)
