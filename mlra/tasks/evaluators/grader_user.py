"""What the grader's own uid needs: the caches it may write, the artifact it reads, the
disk it may fill, and what mlra writes after it in a folder that uid held.

As root the grader's sandbox runs as a host uid claimed for it (tools/sandbox/run_uid.py),
as the agent's does: the submission's code (a model's, a tokenizer's) runs in it, so its
inotify instances, processes and files are that uid's, not root's, and it reads no
root-only file of what it is shown. The shared Hugging Face cache is root's, so it is
shown read-only, and the grader is given a cache of its own in its scratch folder that
mirrors it: a folder for each of its folders, a link for each of its files. A prepared
dataset or a model is read through the links; what the grader writes (a lock, a dataset
it prepares, a download) lands in its own folder, under its disk quota, and a
submission can no longer change the cache the next grading reads.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from mlra.tasks.spec import TaskSpec
from mlra.tools.sandbox import run_uid, trees
from mlra.tools.sandbox.default_limits import Chosen, default_disk, task_disk

CACHE_VARS = ("HF_HOME", "HF_DATASETS_CACHE")
MIRRORS = "hf-caches"
"""In the grader's scratch folder: its own Hugging Face caches (`Mirrors`)."""
LOCK_SUFFIX = ".lock"
"""Not mirrored: locks are made afresh (a link to root's would not open for writing)."""
TOKENS = ("token", "stored_tokens")
"""The Hub's tokens (a cache's own files of these names): no grader's business, so not
mirrored, and masked where the cache itself is shown (huggingface_hub writes them
readable by all)."""
GRADER_DISK_MB = 10 * 1024
"""The grader's scratch quota where the task sets no `disk_gb`: what lm-eval's prepared
datasets and an evaluator's outputs need, never half the disk."""


def grader_disk(task: TaskSpec, work_dir: Path) -> Chosen:
    """The grader's scratch quota: the task's `disk_gb` (as for the agent's workspace),
    else GRADER_DISK_MB, and never more than the default a sandbox gets here."""
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
    `root` (a folder of the scratch folder), the originals to be shown read-only."""

    root: Path
    originals: list[Path] = field(default_factory=list)
    secrets: list[Path] = field(default_factory=list)
    """The caches' token files, masked in the grader's sandbox."""
    relative: dict[str, str] = field(default_factory=dict)
    """Cache variable -> its mirror, relative to the scratch folder."""

    @classmethod
    def make(cls, env: dict[str, str], work_dir: Path) -> Mirrors:
        made = cls(work_dir / MIRRORS)
        trees.remove_tree(made.root, ignore_errors=True)  # a former grading's
        home = env.get("HF_HOME")
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
            _mirror(source, target)
            made.originals.append(source)
            made.secrets += [source / t for t in TOKENS if (source / t).exists()]
            made.relative[name] = target.relative_to(work_dir).as_posix()
        return made

    def holds(self, path: Path | str) -> bool:
        """Whether `path` is one of the mirrored caches or inside one."""
        real = Path(path).resolve()
        return any(real == o or o in real.parents for o in self.originals)

    def point(self, env: dict[str, str], inside: str) -> None:
        """Name the mirrors in `env` as the grader sees its scratch folder (`inside`)."""
        for name, rel in self.relative.items():
            env[name] = f"{inside}/{rel}"

    def remove(self) -> None:
        trees.remove_tree(self.root, ignore_errors=True)


def _mirror(source: Path, target: Path) -> None:
    """A folder for each folder of `source`, a link for each file (a link as it is)."""
    target.mkdir(parents=True, exist_ok=True)
    for folder, dirs, files in os.walk(source, followlinks=False):
        here = target / os.path.relpath(folder, source)
        for name in dirs:
            full = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                if os.path.islink(full):
                    os.symlink(os.readlink(full), here / name)
                else:
                    (here / name).mkdir()
        for name in files:
            if name.endswith(LOCK_SUFFIX) or (name in TOKENS and folder == str(source)):
                continue
            full = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                os.symlink(os.readlink(full) if os.path.islink(full) else full, here / name)


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
