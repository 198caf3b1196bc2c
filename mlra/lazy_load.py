"""What an extension table's line names, imported only when it is used.

The tables of research tools (tools/research_table.py), tracker exports
(batch/export/trackers.py), evaluators (tasks/evaluators/kinds.py) and the command
line's sub-commands (console/cli/cli.py) name their
entries by strings, so reading a table (for `--help`, a flag's choices, a task file's
check) imports nothing heavy, and a table may name code of a layer it must not import.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable


def load(target: str) -> object:
    """`"package.module:attr"`: that attribute of the module; `"package.module"`: the
    module itself (a module that is the entry, as a tracker's writer is)."""
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


def either(words: Iterable[str]) -> str:
    """`a, b or c`: a table's lines as a help text or a refusal lists them."""
    words = list(words)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def one_of(value: object, names: tuple[str, ...] | list[str]) -> str:
    """`value` where a table has it, for a pydantic field that names a table's line;
    else the refusal pydantic gives a value outside a `Literal`, word for word, so a
    task or config file that names no line is told as before the tables were."""
    if isinstance(value, str) and value in names:
        return value
    from pydantic_core import PydanticCustomError

    raise PydanticCustomError(
        "literal_error", "Input should be {expected}", {"expected": either(repr(n) for n in names)}
    )
