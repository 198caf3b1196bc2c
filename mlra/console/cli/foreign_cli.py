"""`mlra tasks` for another benchmark's task folder: what was found in it (`show`), and
`mlra tasks import PATH OUT`, which writes it as an mlra task folder."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlra.console.text.args import EXIT_OK, UsageError
from mlra.tasks.foreign import mlagentbench, mlrcbench
from mlra.tasks.foreign.baselines import baseline_lines, records_baselines
from mlra.tasks.foreign.export import export
from mlra.tasks.foreign.image import task_image, write_context
from mlra.tasks.foreign.loader import LAYOUT_NAMES, detect, is_foreign, marker, near_miss
from mlra.tasks.foreign.prepare import prepare_needs, prepared
from mlra.tasks.foreign.requirements import Unreadable, check, requirement_files, summary
from mlra.tasks.readiness import grading_problems, needs, task_needs, warm_needs
from mlra.tasks.spec import TaskError, find_task, load_task
from mlra.terminal_text import printable_line


def foreign_lines(task: Any) -> list[str]:
    """What `mlra tasks show` adds for a foreign folder: its layout, where its reference
    scores come from, whether it was prepared, and whether this machine satisfies its
    requirements. Empty for an mlra task."""

    if not is_foreign(task.root):
        return []
    root: Path = task.root
    layout = detect(root)
    assert layout is not None
    found = marker(root)
    # The commands it suggests name the folder the user gave, not the prepared copy in
    # the cache (whose name changes with the folder's content).
    named = Path(found.source) if found is not None and Path(found.source).is_dir() else root
    lines = [f"found:      an {LAYOUT_NAMES[layout]} task folder"]
    if found is not None:
        lines.append(
            f"prepared:   {root} (from {found.source}; prepare.py "
            + ("ran" if found.prepared else "absent")
            + ")"
        )
    else:
        has_prepare = (root / "scripts" / "prepare.py").is_file()
        downloads = prepare_needs(root)[0]
        lines.append(
            "prepared:   not yet; `mlra run` "
            + ("runs scripts/prepare.py first, once" if has_prepare else "copies it first")
            + "".join(f"; {said}" for said in downloads)
        )
    if layout == "mlrcbench" and task.metric.baseline is not None and not records_baselines(task):
        reference = f"published ({mlrcbench.PUBLISHED_SOURCE})"
    elif task.metric.baseline is not None:
        reference = "baseline measured by running the unchanged starter"
    else:
        reference = f"baseline unknown: measure it with `mlra run {task.root} --model baseline`"
    lines.append(f"references: {reference}")
    problem = mlagentbench.grading_problem(root) if layout == "mlagentbench" else None
    if problem is not None:
        lines.append(f"grading:    {problem}, so a run of it cannot be graded")
    elif task.metric.self_reported:
        lines.append(f"grading:    self-reported: {task.metric.self_reported}")
    files = ", ".join(p.relative_to(root).as_posix() for p in requirement_files(root))
    if task.environment.declared:
        # Installed in an environment of its own (pip's lines; conda's are not), so not
        # checked against mlra's own packages.
        pins = [r for r in task.environment.requirements if r]
        conda = [
            c.requirement
            for c in check(root)
            if c.source.endswith((".yml", ".yaml")) and c.detail.startswith(("a conda", "Python"))
        ]
        lines.append(
            "requirements: "
            + ", ".join([*([files] if files else []), *pins[:6]])
            + f": pip installs them in the task's own environment (`mlra tasks env {named}`)"
            + (f"; conda's packages are not installed: {', '.join(conda[:8])}" if conda else "")
        )
    else:
        lines.append(
            "requirements: " + (f"{files}: {summary(check(root))}" if files else "none declared")
        )
    lines += baseline_lines(task, named)
    return lines


def cmd_tasks_import(args: argparse.Namespace) -> int:
    if not args.name or not args.out:
        raise UsageError("tasks import: give a task folder and where to write it (PATH OUT)")
    try:
        task = find_task(args.name)
        if not is_foreign(task.root):
            raise UsageError(
                f"tasks import: {args.name} is already an mlra task (it has a task.toml)"
            )
        task = prepared(task)
        out = export(task, Path(args.out))
        load_task(out)  # what was written loads as it is
    except TaskError as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {out}/task.toml, {out}/env and {out}/scripts from {task.root}")
    return EXIT_OK


def task_image_context(path: str, context: Path, base: str, tag: str | None) -> tuple[Path, str]:
    """`mlra image build --task PATH`: the Dockerfile (in `context`) that installs the
    task's requirements on `base`, and the image's name."""

    try:
        task = find_task(path)
    except TaskError as exc:
        raise UsageError(str(exc)) from None
    if not is_foreign(task.root):
        raise UsageError(
            f"image build --task: {path} is not an MLAgentBench or MLRC-Bench task folder"
        )
    try:
        dockerfile = write_context(task.root, context, base=base)
    except Unreadable as exc:
        raise UsageError(f"image build --task: {path}'s environment.yml: {exc}") from None
    return dockerfile, tag or task_image(task.name)


def list_benchmark_folder(folder: Path) -> bool:
    """`mlra tasks BENCHMARKS_DIR` (MLAgentBench's `benchmarks/`, MLRC-Bench's
    `benchmarks_base/`): each task folder in it, what it needs, whether this machine
    meets its requirements, and, marked, where it cannot grade it or the starter lacks a
    module. False when `folder` holds none (it is shown as a task then)."""

    if not folder.is_dir() or (folder / "task.toml").is_file() or detect(folder) is not None:
        return False
    subfolders = sorted(p for p in folder.iterdir() if p.is_dir())
    children = [p for p in subfolders if detect(p) is not None]
    if not children:
        return False
    warm_needs(children)  # one lookup of every folder's imports
    for child in subfolders:
        if child not in children:
            missing = near_miss(child)  # a task folder with a file missing is said, not skipped
            if missing is not None:
                print(printable_line(f"{child.name:<24} NOT A TASK: {missing}"))
            continue
        try:
            task = load_task(child)
        except TaskError as exc:
            print(printable_line(f"{child.name:<24} BROKEN: {exc}"))
            continue
        m = task.metric
        reference = "baseline unknown" if m.baseline is None else f"baseline {m.baseline:g}"
        if task.evaluator.cannot_grade:
            pass  # said below, and no direction matters then
        elif not m.direction_known:
            reference += (
                " · direction unknown (success not judged; state it with --direction "
                "higher|lower or [metric] higher_is_better in the folder's mlra.toml)"
            )
        elif m.self_reported:
            reference += " · self-reported score"
        print(printable_line(f"{task.name:<24} {task.title}"))
        found = task_needs(task)  # once: it reads every file of the task's code
        problems = grading_problems(task, found)
        marks = [f"cannot be graded here: {'; '.join(problems)}"] if problems else []
        marks += prepare_needs(task.root)[1]
        marks += found.starter_problems() + found.fetch_notes()
        print(
            printable_line(
                f"{'':<24} needs {needs(task)} · {reference} · requirements "
                + " · ".join([_requirements_word(task, summary, check), *marks])
            )
        )
    return True


def _requirements_word(task: Any, summary: Any, check: Any) -> str:
    """A listed folder's requirements: installed in its own environment where it declares
    any (not judged against mlra's packages), else whether this machine meets them."""
    env = task.environment
    if not env.declared:
        return summary(check(task.root))
    parts = [*env.files, *env.requirements]
    return (
        "in its own environment ("
        + ", ".join(parts[:4])
        + (", ..." if len(parts) > 4 else "")
        + ")"
    )
