"""Two runs' settings and prompts as diffs (from the first to the second): what a
person reads to learn why two runs of one task went apart.

Their submitted files are diffed by the console (console/screens/compare_screen.py), with the
attempts' workspace diff (console/text/attempt_files.py).
"""

from __future__ import annotations

import difflib

from mlra.batch.compare.runs import ComparedRun

MAX_LINES = 2000


def settings_diff(a: ComparedRun, b: ComparedRun) -> str:
    """One line a setting that differs: `- name: a` then `+ name: b`."""
    out = [f"--- {a.id}", f"+++ {b.id}"]
    for name in sorted(set(a.settings) | set(b.settings)):
        va, vb = a.settings.get(name, "(unset)"), b.settings.get(name, "(unset)")
        if va != vb:
            out += [f"- {name}: {va}", f"+ {name}: {vb}"]
    if len(out) == 2:
        out.append("(the same settings)")
    return "\n".join(out)


def _prompt_lines(run: ComparedRun) -> list[str]:
    lines: list[str] = []
    for who, text in run.prompts:
        lines.append(f"## {who}")
        lines += text.splitlines()
    return lines


def prompts_diff(a: ComparedRun, b: ComparedRun) -> str:
    """A unified diff of the prompts the two logs recorded (each agent's step prompts:
    the clock and budget notes, the people's messages), cut at `MAX_LINES`."""
    lines = list(difflib.unified_diff(_prompt_lines(a), _prompt_lines(b), a.id, b.id, lineterm=""))
    if not lines:
        return "(the same prompts)" if a.prompts else "(neither log recorded a prompt)"
    if len(lines) > MAX_LINES:
        lines = [*lines[:MAX_LINES], f"… the diff is cut here ({MAX_LINES} lines)"]
    return "\n".join(lines)
