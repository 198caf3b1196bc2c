"""A foreign task's Python requirements (`requirements.txt`, conda's `environment.yml`)
checked against this machine, as `mlra tasks` reports them: each pip requirement
against the installed distribution (importlib.metadata, packaging's specifiers); a
conda package has no installed version to ask, so it is reported unknown (Python's
own version aside)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion

Status = Literal["ok", "missing", "mismatch", "unknown"]

PLACES = ("scripts", "env", ".")
"""Where the benchmarks keep them: MLAgentBench's scripts/ or env/, MLRC-Bench's scripts/."""


@dataclass
class Checked:
    requirement: str
    status: Status
    detail: str = ""
    source: str = ""


def requirement_files(folder: Path) -> list[Path]:
    found = []
    for place in PLACES:
        for name in ("requirements.txt", "environment.yml", "environment.yaml"):
            path = folder / place / name
            if path.is_file():
                found.append(path)
    return found


def pip_lines(path: Path) -> list[str]:
    """The requirements a requirements.txt or environment.yml's `pip:` list holds."""
    if path.name == "requirements.txt":
        lines = []
        for line in path.read_text(errors="replace").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#") and not line.startswith("--"):
                lines.append(line)
        return lines
    pip: list[str] = []
    for entry in conda_dependencies(path):
        if isinstance(entry, dict):
            pip += [str(p) for p in entry.get("pip") or []]
    return pip


class Unreadable(Exception):
    """An environment.yml that cannot be read here; the message says why."""


def conda_dependencies(path: Path) -> list[Any]:
    try:
        import yaml
    except ImportError:
        raise Unreadable("PyYAML is not installed to read it") from None
    try:
        data = yaml.safe_load(path.read_text(errors="replace"))
    except (OSError, yaml.YAMLError) as exc:
        raise Unreadable(f"not readable YAML: {' '.join(str(exc).split())[:120]}") from None
    deps = data.get("dependencies") if isinstance(data, dict) else None
    return list(deps) if isinstance(deps, list) else []


def check_pip(line: str) -> Checked:
    if line.startswith("-"):  # -e ./pkg, -r other.txt
        return Checked(line, "unknown", "not a plain requirement")
    try:
        req = Requirement(line)
    except InvalidRequirement:
        return Checked(line, "unknown", "not a requirement pip's syntax reads")
    if req.marker is not None and not req.marker.evaluate():  # `; python_version < "3.8"`
        return Checked(line, "ok", "not for this Python or platform")
    if req.url:
        return Checked(line, "unknown", "installed from a URL")
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        return Checked(line, "missing", "not installed")
    if not req.specifier:
        return Checked(line, "ok", version)
    try:
        ok = req.specifier.contains(version, prereleases=True)
    except InvalidVersion:
        return Checked(line, "unknown", f"installed version {version!r} cannot be compared")
    return Checked(line, "ok" if ok else "mismatch", f"{version} installed")


def check_conda(entry: str) -> Checked:
    name, _, version = entry.replace("==", "=").partition("=")
    if name.strip() == "python" and version:
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        wanted = version.split("=")[0].strip()
        same = here == wanted or here.startswith(wanted + ".") or wanted.startswith(here + ".")
        return Checked(entry, "ok" if same else "mismatch", f"Python {here} here")
    return Checked(entry, "unknown", "a conda package")


def check(folder: Path) -> list[Checked]:
    results: list[Checked] = []
    for path in requirement_files(folder):
        source = path.relative_to(folder).as_posix()
        try:
            if path.name == "requirements.txt":
                checked = [check_pip(line) for line in pip_lines(path)]
            else:
                checked = [
                    check_conda(str(entry))
                    for entry in conda_dependencies(path)
                    if not isinstance(entry, dict) and str(entry).strip() != "pip"
                ]
                checked += [check_pip(line) for line in pip_lines(path)]
        except Unreadable as exc:
            checked = [Checked(path.name, "unknown", str(exc))]
        for item in checked:
            item.source = source
        results += checked
    return results


def summary(results: list[Checked]) -> str:
    """One line: whether this machine satisfies the task's requirements."""
    if not results:
        return "none declared"
    bad = [r for r in results if r.status in ("missing", "mismatch")]
    unknown = [r for r in results if r.status == "unknown"]
    ok = len(results) - len(bad) - len(unknown)
    head = "not satisfied" if bad else "satisfied" if not unknown else "satisfied as far as known"
    parts = [f"{ok} met"]
    if bad:
        parts.append(
            f"{len(bad)} not: " + ", ".join(f"{r.requirement} ({r.detail})" for r in bad[:8])
        )
    if unknown:
        parts.append(
            f"{len(unknown)} unknown: "
            + ", ".join(r.requirement for r in unknown[:8])
            + (" ..." if len(unknown) > 8 else "")
        )
    return f"{head} ({'; '.join(parts)})"
