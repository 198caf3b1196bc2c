"""What both layouts share: the cache their prepared copies live in, the content hash
that names a copy, and `read_only_files.txt` read as the benchmarks read it."""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import functools
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel

Layout = Literal["mlagentbench", "mlrcbench"]

CACHE_VAR = "MLRA_CACHE_DIR"
"""Where prepared copies go (default ~/.cache/mlra): `prepared/<task>-<hash>/`."""

MARKER = "mlra-foreign.json"
"""In a prepared copy: which layout, from where, and that prepare.py already ran, so
loading the copy again (the evaluator, a resumed run) never prepares it twice."""

BASELINE_FILE = "mlra-baseline.json"
"""In a prepared copy: the baseline score measured by running the unchanged starter
(`mlra run PATH --model baseline`), where the benchmark publishes none."""

SKIPPED = {"__pycache__", ".git", ".ipynb_checkpoints", ".DS_Store"}


class Marker(BaseModel):
    layout: Layout
    name: str
    source: str
    hash: str
    prepared: bool
    """Whether a prepare.py ran (a folder without one is copied as it is)."""


def cache_root() -> Path:
    base = os.environ.get(CACHE_VAR)
    return Path(base).expanduser() if base else Path.home() / ".cache" / "mlra"


def prepared_dir(name: str, digest: str) -> Path:
    return cache_root() / "prepared" / f"{name}-{digest[:16]}"


def content_hash(folder: Path) -> str:
    """SHA-256 over every file's path and bytes (a link's target, not followed): the
    same folder always names the same prepared copy, a changed one a new copy. Read
    once per process (a run loads its task, then prepares it: one pass over the data)."""
    return _content_hash(str(folder.resolve()))


@functools.cache
def _content_hash(where: str) -> str:
    folder = Path(where)
    digest = hashlib.sha256(b"mlra-foreign-1\0")
    # The user's mlra.toml (tasks/foreign/overlay.py) is what they state, not the task.
    for path in sorted(_files(folder, skip_top=("mlra.toml",))):
        rel = path.relative_to(folder).as_posix()
        digest.update(rel.encode() + b"\0")
        if path.is_symlink():
            digest.update(b"link:" + os.readlink(path).encode() + b"\0")
            continue
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()


def _files(folder: Path, *, skip_top: tuple[str, ...] = ()) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d not in SKIPPED]
        here = Path(dirpath)
        found += [here / f for f in filenames if f not in SKIPPED]
        if here == folder and skip_top:
            found = [p for p in found if p.name not in skip_top]
        # A link to a folder is not walked into; it is hashed as a link.
        found += [here / d for d in dirnames if (here / d).is_symlink()]
    return found


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def read_only_patterns(path: Path) -> list[str]:
    """The patterns of a `read_only_files.txt`, one a line, `./` dropped (MLRC-Bench
    writes `./main.py`, which its own fnmatch would never match)."""
    patterns = []
    for line in read_text(path).splitlines():
        line = line.strip()
        while line.startswith("./"):
            line = line[2:]
        if line and not line.startswith("#"):
            patterns.append(line)
    return patterns


WHOLE_FOLDER_FILES = 64
"""A folder of at least this many files, every one read-only, is read-only as a folder."""


def expand_read_only(env: Path, patterns: list[str]) -> list[str]:
    """The workspace paths the patterns name, as MLAgentBench's environment matches
    them (fnmatch on each file's path relative to `env/`; `*` crosses folders), a
    large folder whose every file matches named once: a data folder of thousands of
    images (fathomnet's `images/*`) is one read-only mount, where one per file would
    pass bubblewrap's limit on arguments and leave the run without isolation. A small
    one stays file by file, as the benchmarks mean it (Python's `__pycache__` beside
    read-only modules, written under `--isolation none`, is no change to them)."""
    if not patterns or not env.is_dir():
        return []
    files = sorted(path.relative_to(env).as_posix() for path in _files(env))
    matched = [rel for rel in files if any(fnmatch.fnmatch(rel, p) for p in patterns)]
    partly = {"."}  # the workspace itself, and folders holding a file that does not match
    for rel in set(files) - set(matched):
        partly.update(str(parent) for parent in PurePosixPath(rel).parents)
    sizes: dict[str, int] = {}
    for rel in matched:
        for parent in PurePosixPath(rel).parents:
            sizes[str(parent)] = sizes.get(str(parent), 0) + 1
    big = {d for d, n in sizes.items() if n >= WHOLE_FOLDER_FILES}
    names = []
    for rel in matched:
        parents = PurePosixPath(rel).parents
        whole = [str(p) for p in parents if str(p) not in partly and str(p) in big]
        names.append(whole[-1] if whole else rel)  # the outermost folder read-only as a whole
    return list(dict.fromkeys(names))


def first_existing(folder: Path, *names: str) -> Path | None:
    for name in names:
        if (folder / name).is_file():
            return folder / name
    return None


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """One process at a time past this point for `path` (a lock file beside what it
    guards): the runs of a batch that start together wait for the first one."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_only_rule(read_only: list[str]) -> str:
    """The prompt's rule naming the read-only files (the first 30 of them)."""
    more = f" and {len(read_only) - 30} more" if len(read_only) > 30 else ""
    return (
        "These files and folders are read-only (a write to one fails): "
        + ", ".join(read_only[:30])
        + more
        + "."
    )
