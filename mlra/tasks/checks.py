"""Checks a task must pass to load: mistakes a task's author makes that no field's
type catches, each refused with one line naming the file and the field (the loader,
tasks/spec.py, calls these with the values they judge; nothing here imports it).

A reference score on the wrong side of the baseline turns every normalized score
upside down, a recipe naming a script the starter lacks fails only after a run has
been set up, a success rule without the reference it needs can never say
"success": each would otherwise be found, if at all, after hours of a run.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import PurePosixPath

from mlra.tasks.starter import workspace_relative

_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_OPTION_WITH_VALUE = frozenset({"-W", "-X", "-Q"})
_SHELL_OPERATORS = frozenset({"&&", "||", ";", "|", "&", "(", ")", ";;"})


Problem = tuple[str, str]
"""(the field, what is wrong with it): tasks/spec.py makes it one line naming the file."""


def direction_problems(
    higher_is_better: bool, references: dict[str, tuple[float | None, float | None]]
) -> list[Problem]:
    """A top reference that is not better than the baseline in the metric's direction;
    `references` maps a section (`metric`, `validation`) to its (baseline, top)."""
    out = []
    for section, (baseline, top) in references.items():
        if baseline is None or top is None:
            continue
        better = top > baseline if higher_is_better else top < baseline
        if not better:
            word = "higher" if higher_is_better else "lower"
            out.append(
                (
                    f"{section}.top",
                    f"top {top:g} is not better than baseline {baseline:g} with "
                    f"metric.higher_is_better = {str(higher_is_better).lower()} ({word} is "
                    "better): the direction, or one of the two scores, is wrong",
                )
            )
    return out


_RULE_OF = {
    "success_fraction": "gap_fraction",
    "success_improvement": "relative_improvement",
    "success_threshold": "threshold",
}


def success_rule_problems(
    rule: str, baseline: float | None, threshold: float | None, fields_set: set[str]
) -> list[Problem]:
    """A success rule without what it needs, or another rule's field set beside it
    (a bar that would silently not apply)."""
    out = []
    if rule == "relative_improvement" and baseline is None:
        out.append(
            ("metric.baseline", 'success_rule "relative_improvement" needs a baseline score')
        )
    if rule == "threshold" and threshold is None:
        out.append(("metric.success_threshold", 'success_rule "threshold" needs it; it is unset'))
    for name, owner in _RULE_OF.items():
        if name in fields_set and rule != owner:
            out.append(
                (
                    f"metric.{name}",
                    f'is set, but success_rule is "{rule}": it applies only to '
                    f'success_rule = "{owner}"',
                )
            )
    return out


def artifact_problems(artifact: str, submit: str | None) -> list[Problem]:
    """The evaluator's artifact undeclared or outside the workspace, or a recipe that
    submits something else than what the evaluator grades by default."""
    out = []
    clean = workspace_relative(artifact)
    if not artifact.strip():
        out.append(("evaluator.artifact", "is empty: name the file or folder the agent submits"))
    elif artifact.strip() != "." and clean is None:
        out.append(("evaluator.artifact", f"{artifact!r} must be a path inside the workspace"))
    if submit is None:
        return out
    submitted = workspace_relative(submit)
    if submitted is None and submit.strip() != ".":
        out.append(("baseline.submit", f"{submit!r} must be a path inside the workspace"))
    elif (submitted or ".") != (clean or "."):
        out.append(
            (
                "baseline.submit",
                f"{submit!r} is not evaluator.artifact {artifact!r}: the recipe must "
                "submit what the evaluator grades by default",
            )
        )
    return out


def recipe_problems(
    submit: str | None,
    steps: Sequence[tuple[str, str]],
    in_starter: Callable[[str], bool],
    starter: Sequence[str],
) -> list[Problem]:
    """A recipe that cannot run: it submits with no steps, a step has no command, or a
    step runs a `python X.py` that the starter files (`starter`) do not hold.
    `steps` are (title, command)."""
    if submit is not None and not steps:
        return [("baseline.steps", "the recipe submits an artifact but has no steps to make it")]
    out = []
    for i, (title, command) in enumerate(steps):
        field = f"baseline.steps.{i}.command"
        if not command.strip():
            out.append((field, f"step {title!r} has an empty command"))
            continue
        for script in scripts_run(command):
            if not in_starter(script):
                out.append(
                    (
                        field,
                        f"runs {script!r}, which is not among the starter files "
                        f"({', '.join(starter) or 'none'})",
                    )
                )
    return out


def read_only_problems(
    read_only: Sequence[str], in_starter: Callable[[str], bool]
) -> list[Problem]:
    """Read-only paths that are not workspace paths the starter files fill."""
    out = []
    for rel in read_only:
        if workspace_relative(rel) is None:
            out.append(("files.read_only", f"{rel!r} must be a path inside the workspace"))
        elif not in_starter(rel):
            out.append(
                (
                    "files.read_only",
                    f"{rel!r} is not a starter file: the workspace would not hold it",
                )
            )
    return out


def scripts_run(command: str) -> list[str]:
    """The workspace-relative scripts a shell command runs with `python X.py`, where
    they can be told statically (a `cd` into a relative folder is followed; `-c`,
    `-m`, absolute paths and variables are left alone)."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: the shell will say so when it runs
        return []
    found: list[str] = []
    cwd = PurePosixPath(".")
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "cd" and i + 1 < len(tokens):
            target = tokens[i + 1]
            if target.startswith(("/", "~", "$")) or target in _SHELL_OPERATORS:
                return found  # somewhere this check cannot follow
            cwd = cwd / target
            i += 2
            continue
        if _PYTHON.fullmatch(PurePosixPath(token).name):
            script = _script_after(tokens, i + 1)
            if script is not None:
                rel = workspace_relative(posixpath.normpath((cwd / script).as_posix()))
                if rel is not None:
                    found.append(rel)
        i += 1
    return found


def _script_after(tokens: list[str], start: int) -> str | None:
    """The script a `python` command line names after its options, if it is one."""
    i = start
    while i < len(tokens):
        token = tokens[i]
        if token in _SHELL_OPERATORS:
            return None
        if token in ("-c", "-m", "-") or token.startswith(("-c", "-m")):
            return None
        if token in _OPTION_WITH_VALUE:
            i += 2
            continue
        if token.startswith("-"):
            i += 1
            continue
        if token.endswith(".py") and not token.startswith(("/", "$", "~")) and "$" not in token:
            return token
        return None
    return None
