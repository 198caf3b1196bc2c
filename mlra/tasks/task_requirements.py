"""A task's Python requirements as the lines its environment is built from: `[environment]`
in task.toml (lines and files), a foreign folder's own `requirements.txt` or
`environment.yml` pip list, and the pins that keep a benchmark's folder in its era
where its own files say nothing. Nothing here imports the task format, so the foreign
loader can ask for a folder's `[environment]` as it reads the folder."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from mlra.tasks.foreign.requirements import Unreadable, pip_lines, requirement_files

ERA_PINS: dict[Literal["mlagentbench", "mlrcbench"], tuple[str, ...]] = {
    "mlagentbench": ("numpy<2",),
    "mlrcbench": (),
}
"""Pins a benchmark's folder gets for each package its own files do not name.

MLAgentBench (2023) predates NumPy 2: its vectorization starter stores a (1,1,1) array
in one element of another (`output[index, h, w, f] = result`), which NumPy 1.25 to 1.26
allow with a DeprecationWarning and NumPy 2 refuses ("setting an array element with a
sequence"); its eval.py then returns its failure value 1e10. Under `numpy<2` (1.26.4)
the unchanged starter runs (about 2 s here). MLRC-Bench's folders ship an
environment.yml naming their stack; no failure of theirs on today's packages is known,
so they get none (a pin with no failure behind it would only cost a build). A folder
whose files name the package (any version) overrides its pin; so does editing
`[environment]` in the task.toml `mlra tasks import` writes."""


class RequirementsError(Exception):
    """Requirements that cannot be read or installed as given; the message says which."""


def foreign_environment(
    folder: Path, layout: Literal["mlagentbench", "mlrcbench"]
) -> dict[str, list[str]]:
    """A foreign folder's `[environment]`: its own requirement files, and the era's pins
    for the packages they do not name."""
    files = requirement_files(folder)
    named: set[str] = set()
    for path in files:
        try:
            named |= {name for line in pip_lines(path) if (name := requirement_name(line))}
        except (Unreadable, OSError):
            continue  # said when the environment is built (and by `mlra tasks show`)
    pins = [pin for pin in ERA_PINS[layout] if requirement_name(pin) not in named]
    return {
        "files": [path.relative_to(folder).as_posix() for path in files],
        "requirements": pins,
    }


def requirement_name(line: str) -> str | None:
    try:
        return canonicalize_name(Requirement(line).name)
    except InvalidRequirement:
        return None


def requirement_lines(root: Path, requirements: list[str], files: list[str]) -> list[str]:
    """Every requirement, normalized (`numpy < 2` reads `numpy<2`), deduplicated and
    sorted: the same requirements written in another order or spacing name the same
    environment. A `-r other.txt` line is read where it points; any other pip option
    (`-e ./pkg`, `--index-url`) is refused, since the environment is built from the lines
    alone."""
    lines = [*requirements]
    for rel in files:
        path = (root / rel).resolve()
        if root.resolve() not in path.parents:
            raise RequirementsError(f"[environment] files: {rel!r} is outside the task folder")
        lines += _file_lines(path, rel, seen=set())
    return sorted({normalized(line) for line in lines if line.strip()})


def _file_lines(path: Path, rel: str, *, seen: set[Path]) -> list[str]:
    if path in seen:
        return []
    seen.add(path)
    if not path.is_file():
        raise RequirementsError(f"[environment] files: {rel!r} does not exist")
    try:
        raw = pip_lines(path) if path.suffix in (".yml", ".yaml") else _text_lines(path)
    except Unreadable as exc:
        raise RequirementsError(f"{rel}: {exc}") from None
    except OSError as exc:
        raise RequirementsError(f"{rel}: cannot be read: {exc}") from None
    lines: list[str] = []
    for line in raw:
        if line.startswith(("-r ", "--requirement ", "--requirement=")):
            split = line.split("=", 1) if line.startswith("--requirement=") else line.split(None, 1)
            target = split[1].strip()
            lines += _file_lines((path.parent / target).resolve(), target, seen=seen)
        elif line.startswith("-"):
            raise RequirementsError(
                f"{rel}: {line!r} is a pip option, not a requirement; a task's environment "
                "is built from plain requirements (name, version, markers, or `name @ URL`)"
            )
        else:
            lines.append(line)
    return lines


def _text_lines(path: Path) -> list[str]:
    """A requirements file's lines as pip reads them: comments and blank lines dropped,
    a line continued with a backslash joined."""
    text = path.read_text(errors="replace").replace("\\\n", " ")
    lines = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def normalized(line: str) -> str:
    line = " ".join(line.split())
    try:
        return str(Requirement(line))
    except InvalidRequirement:
        raise RequirementsError(f"{line!r} is not a requirement pip's syntax reads") from None
