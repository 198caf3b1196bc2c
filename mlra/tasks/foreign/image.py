"""A Docker image for a foreign task: mlra's image (or another base) with the task's
pip requirements installed (`requirements.txt`, the `pip:` list of an
`environment.yml`). Conda's own packages cannot be installed by pip; the Dockerfile
names them in a comment, for a base image that must already hold them."""

from __future__ import annotations

import re
from pathlib import Path

from mlra.tasks.foreign.requirements import (
    check_conda,
    conda_dependencies,
    pip_lines,
    requirement_files,
)

DEFAULT_BASE = "mlra:latest"


def image_tag(name: str) -> str:
    return "mlra-task-" + (re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.") or "task")


def task_image(name: str) -> str:
    """The image `mlra image build --task` tags for the task of this name."""
    return f"{image_tag(name)}:latest"


def write_context(folder: Path, context: Path, *, base: str = DEFAULT_BASE) -> Path:
    """The build context for the task in `folder`: its Dockerfile and requirements.txt.
    Raises `Unreadable` for an environment.yml it cannot read (no image is better than
    one without the task's requirements)."""
    pip: list[str] = []
    conda: list[str] = []
    for path in requirement_files(folder):
        pip += pip_lines(path)
        if path.name != "requirements.txt":
            conda += [
                str(e)
                for e in conda_dependencies(path)
                if not isinstance(e, dict) and str(e).strip() != "pip"
            ]
    pip = list(dict.fromkeys(p for p in pip if not p.startswith("-")))
    context.mkdir(parents=True, exist_ok=True)
    (context / "requirements.txt").write_text("\n".join(pip) + "\n")
    lines = [
        f"# The task {folder.name}'s requirements on top of {base} (mlra image build --task).",
        f"FROM {base}",
    ]
    skipped = [c for c in conda if check_conda(c).status == "unknown"]
    if skipped:
        lines.append(
            "# conda packages pip cannot install (the base must hold them): " + ", ".join(skipped)
        )
    if pip:
        lines += [
            "COPY requirements.txt /tmp/task-requirements.txt",
            "RUN pip install -r /tmp/task-requirements.txt",
        ]
    dockerfile = context / "Dockerfile"
    dockerfile.write_text("\n".join(lines) + "\n")
    return dockerfile
