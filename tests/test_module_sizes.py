"""No module of the package grows past MAX_LINES: a module that long holds two things,
and a reader cannot tell from its name what is in it (issue 29). Lines are counted as
`wc -l` counts them. The task folders' own scripts (tasks/builtin/) are not the package.

OVER_THE_LIMIT names the modules still longer, each with why it is not split yet; an
entry must go once its module is split (the test says so), so the list only shrinks."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 450

OVER_THE_LIMIT: dict[str, str] = {
    # One class, the container's life cycle, already apart from its exec, stats and
    # preflight checks (docker_exec.py, docker_stats.py, docker_preflight.py).
    "mlra/tools/sandbox/docker_sandbox.py": "the container's settings apart from its life cycle",
}


def _modules() -> list[Path]:
    """Every .py file of the package, less the built-in task folders' scripts."""
    return sorted(
        p
        for p in (ROOT / "mlra").rglob("*.py")
        if "__pycache__" not in p.parts
        and p.relative_to(ROOT).parts[:3] != ("mlra", "tasks", "builtin")
    )


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def test_no_module_grows_past_the_limit() -> None:
    over = {
        p.relative_to(ROOT).as_posix(): n
        for p in _modules()
        if (n := _lines(p)) > MAX_LINES and p.relative_to(ROOT).as_posix() not in OVER_THE_LIMIT
    }
    assert not over, (
        f"modules over {MAX_LINES} lines (split each where it holds two things): "
        + ", ".join(f"{path} ({n})" for path, n in sorted(over.items()))
    )


def test_the_modules_let_off_are_still_over_it() -> None:
    """An entry whose module was split, moved or removed goes from the list."""
    sizes = {p.relative_to(ROOT).as_posix(): _lines(p) for p in _modules()}
    stale = [path for path in OVER_THE_LIMIT if sizes.get(path, 0) <= MAX_LINES]
    assert not stale, f"no longer over {MAX_LINES} lines: remove from OVER_THE_LIMIT: {stale}"
