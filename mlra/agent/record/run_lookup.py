"""A run as the user names it: its folder, or its id as `mlra runs` lists it, or the start
of that id (`20261201-0203` for `20261201-020315-tiny-lm-d944e8e7...`), in a runs folder.

One lookup for every command that takes a run (console/text/args.py `find_run`) and for
`--model replay:RUN`: `mlra compare` took the start of an id where `mlra replay` said the
same words were not a run folder.
"""

from __future__ import annotations

from pathlib import Path

from mlra.agent.record.eventlog import EVENTS_FILE


class NoSuchRun(ValueError):
    """The name is no run: no folder, and no id, or the start of several (the message,
    one line, says which)."""


def find_run(name: str, runs_dir: Path, *, folders: bool = False) -> Path:
    """The run `name` names: a run folder as given, or in `runs_dir`; else the one run
    whose id starts so, in `runs_dir` (a bare name) or in the folder the name gives
    (`runs/20261201-0203`). `folders`: any folder counts, not only a run's (`mlra compare`,
    `share` and `export` take a batch's too). A folder that is no run is returned as
    named, for its command to say why; NoSuchRun where nothing is found or a start
    names several."""

    def counts(path: Path) -> bool:
        return path.is_dir() if folders else (path / EVENTS_FILE).is_file()

    path = Path(name)
    for candidate in (path, runs_dir / name):
        if name and counts(candidate):
            return candidate
    if name and path.exists():  # named, but no run: its command says why
        return path
    where = runs_dir if len(path.parts) == 1 else path.parent
    start = path.name
    if start not in ("", ".", "..") and where.is_dir():
        found = sorted(p for p in where.iterdir() if p.name.startswith(start) and counts(p))
        if len(found) == 1:
            return found[0]
        if found:
            named = ", ".join(p.name for p in found[:3]) + (", ..." if len(found) > 3 else "")
            raise NoSuchRun(
                f"{start!r} is the start of {len(found)} run ids in {where} ({named}): "
                "say more of it"
            )
    what = "a folder" if folders else f"a run folder (no {EVENTS_FILE})"
    raise NoSuchRun(f"no run {name!r}: not {what}, nor a run id (or the start of one) in {where}")
