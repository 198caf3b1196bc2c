"""How a batch tells its tasks apart: by name, and by folder where two share a name.

A task's runs are keyed by what the batch calls the task (batch/run_ids.py), and the
report groups them by it, so two folders whose tasks share a name (`mlagentbench/cifar10`
and `mlrc/cifar10`, or two copies of one task) would be one task with colliding runs.
Each of those is called instead by the shortest end of its folder's path that no other
task of the batch is called by (`mlagentbench/cifar10`): what a person would say to
tell them apart. A task whose name is its own keeps it, so a batch with no such clash
names its runs as it always did, and its folder carries on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path


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
