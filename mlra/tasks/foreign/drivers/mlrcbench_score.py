"""The script evaluator's driver for an MLRC-Bench task: one phase of the benchmark's
own `main.py` on a copy of the frozen workspace.

    python mlrcbench_score.py ARTIFACT TASK_ROOT OUT_JSON --phase dev|test --scripts DIR --env DIR

The copy is made in the scratch folder (main.py writes `output/`), with the read-only
files put back from the task's `env/`. For the test phase it is set up as MLRC-Bench's
launch.sh sets up its snapshot: `scripts/test_data/*` linked into `data/`, and
`scripts/test_constants.py` over `constants.py`. The method is the one the agent named
in `method_name.txt` (`my_method` without it). The score is the `performance` that
`save_evals` (the MLAgentBench stand-in in the workspace) recorded for that method
and phase in `output/idea_evals.json`.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

METHOD_FILE = "method_name.txt"
DEFAULT_METHOD = "my_method"
SHIM = "MLAgentBench"


def _read_only(task_root: Path, scripts: str, env: Path) -> list[str]:
    listed = task_root / scripts / "read_only_files.txt"
    patterns = [f"{SHIM}/*"]
    if listed.is_file():
        for line in listed.read_text(errors="replace").splitlines():
            line = line.strip()
            while line.startswith("./"):
                line = line[2:]
            if line and not line.startswith("#"):
                patterns.append(line)
    found = []
    for dirpath, dirnames, filenames in os.walk(env):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            rel = (Path(dirpath) / name).relative_to(env).as_posix()
            if any(fnmatch.fnmatch(rel, p) for p in patterns):
                found.append(rel)
    return found


def _restore_read_only(copy: Path, task_root: Path, scripts: str, env: Path) -> None:
    """The benchmark's read-only files as the task has them, whatever the copy holds:
    a score never rests on a changed evaluation.py, in either phase."""
    for rel in _read_only(task_root, scripts, env):
        target = copy / rel
        if target.is_symlink() or target.is_file():
            target.unlink()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(env / rel, target)


def _remove_shadows(copy: Path, modules: list[str]) -> None:
    """Whatever Python would import in place of a read-only module: a package folder or
    an extension module of its name, a sourceless .pyc beside it (and, with
    PYTHONPYCACHEPREFIX set for main.py, no `__pycache__` is read): an agent that
    leaves evaluation.py alone but plants `__pycache__/evaluation.*.pyc` or
    `evaluation/__init__.py` must not be graded by its own evaluation."""
    for rel in modules:
        source = copy / rel
        stem, folder = source.name[: -len(".py")], source.parent
        if not folder.is_dir() or folder.is_symlink():
            continue
        for entry in folder.iterdir():
            name = entry.name
            shadows = (
                name == stem
                or name in (f"{stem}.pyc", f"{stem}.so", f"{stem}.pyd")
                or (name.startswith(stem + ".") and name.endswith((".so", ".pyd")))
            )
            if not shadows:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def _set_up_test(copy: Path, task_root: Path, scripts: str) -> None:
    test_data = task_root / scripts / "test_data"
    if test_data.is_dir():
        data = copy / "data"
        data.mkdir(exist_ok=True)
        for item in test_data.iterdir():
            target = data / item.name
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.is_dir():
                shutil.rmtree(target)
            target.symlink_to(item.resolve())
    constants = task_root / scripts / "test_constants.py"
    if constants.is_file():
        shutil.copy2(constants, copy / "constants.py")


def _method(copy: Path) -> str:
    named = copy / METHOD_FILE
    if not named.is_file():
        return DEFAULT_METHOD
    text = named.read_text(errors="replace").strip()
    return text.splitlines()[0].strip() if text else DEFAULT_METHOD


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("artifact", type=Path)
    parser.add_argument("task_root", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--phase", choices=["dev", "test"], default="test")
    parser.add_argument("--scripts", default="scripts")
    parser.add_argument("--env", default="env")
    args = parser.parse_args(argv)
    task_root = args.task_root.resolve()
    env = task_root / args.env
    copy = Path.cwd() / f"{args.phase}-copy"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(args.artifact, copy, symlinks=True)
    method = _method(copy)
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", method):
        print(f"{METHOD_FILE} names no method: {method[:80]!r}", file=sys.stderr)
        return 1
    _restore_read_only(copy, task_root, args.scripts, env)
    if args.phase == "test":
        _set_up_test(copy, task_root, args.scripts)
    guarded = [*_read_only(task_root, args.scripts, env), "constants.py"]
    _remove_shadows(copy, [rel for rel in guarded if rel.endswith(".py")])
    evals = copy / "output" / "idea_evals.json"
    evals.unlink(missing_ok=True)  # the agent's own dev runs are not this phase's
    print(f"MLRC-Bench {args.phase} phase: python main.py -m {method} -p {args.phase}", flush=True)
    # Bytecode is read only from a fresh cache, never from __pycache__ in the copy.
    pycache = Path.cwd() / f"{args.phase}-pycache"
    env_vars = {**os.environ, "PYTHONPYCACHEPREFIX": str(pycache)}
    proc = subprocess.run(
        [sys.executable, "main.py", "-m", method, "-p", args.phase],
        cwd=copy,
        env=env_vars,
        check=False,
    )
    if proc.returncode != 0:
        print(f"main.py -m {method} -p {args.phase} exited {proc.returncode}", file=sys.stderr)
        return 1
    try:
        recorded = json.loads(evals.read_text())["implementations"]
        mine = [
            e for e in recorded if e.get("phase") == args.phase and e.get("method_name") == method
        ]
        score = float(mine[-1]["performance"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        print(f"main.py recorded no {args.phase} score for {method}: {exc!r}", file=sys.stderr)
        return 1
    if not math.isfinite(score):
        print(f"main.py's score is {score}", file=sys.stderr)
        return 1
    metrics = {"runtime_s": float(mine[-1].get("runtime") or 0.0)}
    args.out.write_text(json.dumps({"score": score, "metrics": metrics}))
    print(f"{method} {args.phase} score: {score}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
