"""The task's files the grader's own uid could not read, copied for it by mlra.

As root the grader runs as a uid claimed for it (grader_user.py), which reads the task
folder as any user would: a hidden file the task's author left 0600 (a checker's
answers, a script written with a tight umask) is `Permission denied` to it, and the
grading fails on the task's own files. mlra never changes the user's files in place
(no chmod, no chown of the task folder); it copies each file or folder the grader could
not read into a folder beside the grading's scratch folder, readable by all but
writable by none and inside the run folder (0700), and the sandbox shows each copy
read-only over its original (`SandboxSpec.read_only_over`). The submission's code runs
as the same uid, so the copies are never in the scratch folder, which is that uid's.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

from mlra.tools.sandbox import trees
from mlra.tools.sandbox.start_step import made_or_undone

COPY_WAIT_S = 60.0
"""How long a grading stopped as the copies are made waits for their removal (the copy
is told to stop between files, so it is the file being copied); a copy still going by
then removes them itself when it ends."""
OTHERS_READ = stat.S_IROTH
OTHERS_ENTER = stat.S_IROTH | stat.S_IXOTH


@dataclass
class TaskCopies:
    """Readable copies of the task's unreadable files, in `folder`, each shown over its
    original (`over`: original -> copy) while the grader runs."""

    folder: Path
    over: dict[Path, Path] = field(default_factory=dict)

    @classmethod
    def make(
        cls, task_root: Path, work_dir: Path, stop: threading.Event | None = None
    ) -> TaskCopies:
        """The copies, cut short once `stop` is set (the grading gave up before its
        sandbox started: its `remove` undoes what was copied)."""
        shelf = work_dir.with_name(f"{work_dir.name}-task-files")
        for former in _listed(shelf):  # former gradings'
            trees.remove_tree(shelf / former, ignore_errors=True)
        # A folder of its own: a former grading's copy that outlasted its wait (one huge
        # file) removes what it made when it ends, and must not take this one's with it.
        made = cls(shelf / secrets.token_hex(4))
        stop = stop or threading.Event()

        def copy_file(src: str, dst: str) -> object:
            if stop.is_set():
                raise InterruptedError("the grading gave up")
            return shutil.copy2(src, dst)

        for original in unreadable(task_root.resolve()):
            if stop.is_set():
                break
            copy = made.folder / str(len(made.over))
            try:
                made.folder.mkdir(mode=0o755, parents=True, exist_ok=True)
                made.folder.parent.chmod(0o755)
                if original.is_dir():
                    shutil.copytree(original, copy, symlinks=True, copy_function=copy_file)
                    for entry in [copy, *copy.rglob("*")]:
                        _readable(entry)
                else:
                    shutil.copyfile(original, copy, follow_symlinks=False)
                    _readable(copy, executable=bool(original.stat().st_mode & stat.S_IXUSR))
            except (OSError, shutil.Error):
                # Not copied (the disk is full, it went): the grader meets the original's
                # `Permission denied`, and the evaluator's error names the file.
                trees.remove_tree(copy, ignore_errors=True)
                continue
            made.over[original] = copy
        return made

    def remove(self) -> None:
        trees.remove_tree(self.folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.folder.parent.rmdir()  # the shelf, where no other grading's copies are


def _listed(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


async def copied(task_root: Path, work_dir: Path) -> TaskCopies:
    """`TaskCopies.make` in a thread; a grading cancelled meanwhile (an attempt stopped
    as its validation starts) stops the copy and removes what it made before the
    cancellation goes on (start_step.py). Unwaited, the thread went on copying the task's
    hidden files, readable by all, into a folder that no grading removed."""
    stop = threading.Event()

    def make() -> TaskCopies:
        return TaskCopies.make(task_root, work_dir, stop)

    return await made_or_undone(make, TaskCopies.remove, COPY_WAIT_S, stop=stop)


def unreadable(root: Path) -> list[Path]:
    """What of `root` a user with no claim on it could not read: a regular file others may
    not read, a folder others may not list and enter (taken whole, not entered). Links
    are left as they are (what they lead to is shown or not as it would be)."""
    if _mode(root) & OTHERS_ENTER != OTHERS_ENTER:
        return [root]
    found: list[Path] = []
    todo = [root]
    while todo:
        folder = todo.pop()
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in entries:
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue
                if stat.S_ISDIR(mode):
                    if mode & OTHERS_ENTER != OTHERS_ENTER:
                        found.append(Path(entry.path))
                    else:
                        todo.append(Path(entry.path))
                elif stat.S_ISREG(mode) and not mode & OTHERS_READ:
                    found.append(Path(entry.path))
    return sorted(found)


def _mode(path: Path) -> int:
    try:
        return os.stat(path).st_mode
    except OSError:
        return 0o755  # gone: the evaluator says what is missing


def _readable(path: Path, *, executable: bool = False) -> None:
    """Readable by all, writable by none (a folder also enterable, a program runnable)."""
    if path.is_symlink():
        return
    st = path.stat()
    if stat.S_ISDIR(st.st_mode):
        path.chmod(0o555)
    else:
        runnable = executable or bool(st.st_mode & stat.S_IXUSR)
        path.chmod(0o555 if runnable else 0o444)
