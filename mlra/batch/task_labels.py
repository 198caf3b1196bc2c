"""How a batch tells its tasks apart: by name, and by folder where two share a name.

A task's runs are keyed by what the batch calls the task (batch/run_ids.py), and the
report groups them by it, so two folders whose tasks share a name (`mlagentbench/cifar10`
and `mlrc/cifar10`, or two copies of one task) would be one task with colliding runs.
Each of those is called instead by the shortest end of its folder's path that no other
task of the batch is called by (`mlagentbench/cifar10`): what a person would say to
tell them apart. A task whose name is its own keeps it, so a batch with no such clash
names its runs as it always did, and its folder carries on.

Runs made one by one are told apart the same way, from the folder each one's log
recorded (`run_started`'s `task_dir`): `mlra runs` among the runs of its folder, `mlra
compare` among the runs compared, a run's shared page and `mlra export` among the runs
beside it, so two tasks of one name are never one task on any of them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE


def task_labels(tasks: Sequence[tuple[str, Path]]) -> list[str]:
    """Each task's label, in order: its name, or where another task has the same name,
    the shortest tail of its folder (resolved, so distinct) no other label equals."""
    names = Counter(name for name, _ in tasks)
    depth = {i: 1 for i, (name, _) in enumerate(tasks) if names[name] > 1}
    while True:
        labels = [
            _tail(folder, depth[i]) if i in depth else name
            for i, (name, folder) in enumerate(tasks)
        ]
        seen = Counter(labels)
        alike = [i for i in depth if seen[labels[i]] > 1 and depth[i] < len(tasks[i][1].parts)]
        if not alike:
            return labels
        for i in alike:
            depth[i] += 1


def _tail(folder: Path, parts: int) -> str:
    tail = folder.parts[-parts:]
    return Path(*tail).as_posix() if tail else folder.as_posix()


RecordedTask = tuple[str, str]
"""A run's task as its log's `run_started` records it: (name, folder), the folder empty
where the run recorded none."""


def recorded_task(run_dir: Path) -> RecordedTask | None:
    """The task the run's log says it ran (its first event, `run_started`); None where
    the log is missing or opens with anything else. One line read, so listing many runs
    costs one line each."""
    try:
        with open(run_dir / EVENTS_FILE, "rb") as f:
            first = f.readline()
        started = ev.parse_event(first)
    except (OSError, ValueError):
        return None
    if not isinstance(started, ev.RunStarted):
        return None
    return started.task, started.task_dir


def run_task_labels(tasks: Sequence[RecordedTask]) -> list[str]:
    """Each run's task label among these runs, as a batch would label those tasks: runs
    of one folder are one task; two folders whose tasks share a name are told apart by
    the ends of their paths (`task_labels`). A run that recorded no folder keeps its
    name: nothing it recorded tells which task of that name it ran."""
    distinct = list(dict.fromkeys((n, _folder(f)) for n, f in tasks if f))
    labels = dict(zip(distinct, task_labels(distinct), strict=True))
    return [labels.get((n, _folder(f)), n) if f else n for n, f in tasks]


BUILTIN = ("mlra", "tasks", "builtin")


def _folder(recorded: str) -> Path:
    """The folder that says which task a run ran: the one it recorded, but a built-in
    task's as one path whichever mlra ran it (its folder moves with the install: a new
    virtual environment, another Python), so a task's runs from before an upgrade stay
    its runs, and one clashing with a task folder of its name is `builtin/<name>`."""
    folder = Path(recorded)
    if folder.parts[-4:-1] == BUILTIN:
        return Path(*BUILTIN, folder.name)
    return folder


def label_beside(run_dir: Path) -> str | None:
    """What the run's task is called among the runs beside it (the runs folder or the
    batch's `runs/` it sits in), as `mlra runs` lists that folder; None where its log
    records no task."""
    own = recorded_task(run_dir)
    if own is None:
        return None
    try:
        siblings = [p for p in run_dir.parent.iterdir() if p.is_dir() and p != run_dir]
    except OSError:
        siblings = []
    beside = [t for t in map(recorded_task, sorted(siblings)) if t is not None]
    return run_task_labels([own, *beside])[0]


def told_apart(names: Sequence[str], labels: Sequence[str]) -> str:
    """The line that says which names stand for more than one task and how each is
    called (empty where none does): `2 tasks are named answer, told apart by their
    folders: mlagentbench/answer, mlrc/answer`."""
    shared: dict[str, list[str]] = {}
    for name, label in zip(names, labels, strict=True):
        if label not in shared.setdefault(name, []):
            shared[name].append(label)
    parts = [
        f"{len(ls)} tasks are named {name}, told apart by their folders: {', '.join(sorted(ls))}"
        for name, ls in sorted(shared.items())
        if len(ls) > 1
    ]
    return "; ".join(parts)
