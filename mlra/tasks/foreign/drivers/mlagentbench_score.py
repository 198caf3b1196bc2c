"""The script evaluator's driver for an MLAgentBench task: the benchmark's own
`eval.py`, its `get_score(submission_folder)` called on the frozen copy of the
workspace, as MLAgentBench's eval does on a run's final files.

    python mlagentbench_score.py ARTIFACT TASK_ROOT OUT_JSON --scripts DIR

Runs inside mlra's evaluation sandbox, with the scratch folder as its working
folder (eval.py's relative paths land there) and the scripts folder first on the
import path (eval.py's own helpers beside it). The scratch folder shows the task's
own starter files (`--env`, linked, never the agent's copy): cifar10's eval.py reads
its test set from `./data` (`CIFAR10(root='./data', download=True)`), which
prepare.py put in env/data, and without it would download the set in a sandbox
with no network.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path


def _show_starter(env: Path, here: Path) -> None:
    if not env.is_dir() or env.resolve() == here.resolve():
        return
    for entry in env.iterdir():
        target = here / entry.name
        if not target.exists() and not target.is_symlink():
            target.symlink_to(entry.resolve())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("artifact", type=Path)
    parser.add_argument("task_root", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--scripts", default="scripts")
    parser.add_argument("--env", default="env")
    args = parser.parse_args(argv)
    _show_starter(args.task_root / args.env, Path.cwd())
    scripts = (args.task_root / args.scripts).resolve()
    eval_py = scripts / "eval.py"
    if not eval_py.is_file():
        print(f"task error: {args.scripts}/eval.py is missing", file=sys.stderr)
        return 2
    sys.path.insert(0, str(scripts))
    spec = importlib.util.spec_from_file_location("eval", eval_py)
    if spec is None or spec.loader is None:
        print(f"task error: {eval_py} cannot be imported", file=sys.stderr)
        return 2
    module = importlib.util.module_from_spec(spec)
    sys.modules["eval"] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:  # the task's own mistake, said as one line
        print(f"task error: {args.scripts}/eval.py line {exc.lineno}: {exc.msg}", file=sys.stderr)
        return 2
    get_score = getattr(module, "get_score", None)
    if get_score is None:
        print("task error: eval.py has no get_score", file=sys.stderr)
        return 2
    value = get_score(str(args.artifact.resolve()))
    try:
        score = float(value)
    except (TypeError, ValueError):
        # Said as what eval.py gave back, not as a traceback of this line.
        print(f"get_score returned {_shown(value)}, not a number", file=sys.stderr)
        return 1
    if not math.isfinite(score):
        print(f"get_score returned {score}", file=sys.stderr)
        return 1
    print(f"get_score: {score}")
    args.out.write_text(json.dumps({"score": score}))
    return 0


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
