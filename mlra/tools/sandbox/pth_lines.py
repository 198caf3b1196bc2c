"""The folders Python environments' `.pth` files put on the path, read as site.py reads
them, where mlra's own `sys.path` does not say what the interpreter inside the local
sandbox looks up (bwrap.py shows them):

- A relative line is joined to its site folder's path as written. Outside, mlra's venv
  may be read through a link (a project's `.venv` leading to the venv's real folder);
  inside, the interpreter starts from the real folder (env.shown_interpreter), so the
  same line names another place there, and the borrowed packages were missing inside
  alone.
- A task's own environment (tasks/environment.py) is not the one mlra runs in: its
  lines are on no path of mlra's.
"""

from __future__ import annotations

import glob
import os
import site
import sys
from pathlib import Path


def pth_lines(site_dir: str) -> list[tuple[str, str]]:
    """(the line, the folder it names) for each line of `site_dir`'s `.pth` files that
    names a folder, joined to `site_dir` and made absolute without resolving links, as
    site.py does; `import` lines run code and are not read."""
    found: list[tuple[str, str]] = []
    try:
        names = sorted(n for n in os.listdir(site_dir) if n.endswith(".pth"))
    except OSError:
        return found
    for name in names:
        if name.startswith("."):
            continue  # site.py skips hidden ones
        try:
            text = Path(site_dir, name).read_text(encoding="utf-8-sig", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            line = line.rstrip()
            if not line.strip() or line.startswith("#") or line.startswith(("import ", "import\t")):
                continue
            found.append((line, os.path.abspath(os.path.join(site_dir, line))))
    return found


def moved_relative_lines() -> list[tuple[str, str]]:
    """(where the interpreter inside looks, where mlra's own looked) for each relative
    line of mlra's environment that names another place from the environment's real
    folder than from its path as mlra runs it."""
    prefix = sys.prefix
    real = os.path.realpath(prefix)
    if real == prefix:
        return []
    moved: list[tuple[str, str]] = []
    for site_dir in site.getsitepackages():
        if not site_dir.startswith(prefix + os.sep):
            continue
        inside_dir = os.path.join(real, os.path.relpath(site_dir, prefix))
        for line, outside in pth_lines(site_dir):
            inside = os.path.abspath(os.path.join(inside_dir, line))
            if not os.path.isabs(line) and inside != outside:
                moved.append((inside, outside))
    return moved


def env_lines(env: Path) -> list[str]:
    """The folders a task environment's own `.pth` lines name (relative ones from its
    path as the sandbox runs it: its `bin` is on the command's PATH)."""
    found: list[str] = []
    for site_dir in sorted(glob.glob(str(env / "lib" / "python*" / "site-packages"))):
        found += [folder for _, folder in pth_lines(site_dir)]
    return found
