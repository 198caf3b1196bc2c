"""The tools every acting agent gets; their names are a contract with the prompts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlra import events as ev
from mlra.tools.edit_file import EditFile
from mlra.tools.files import ReadFile, WriteFile
from mlra.tools.job_tools import job_tools
from mlra.tools.jobs import JobManager
from mlra.tools.list_files import ListFiles
from mlra.tools.notes import Note
from mlra.tools.registry import Tool
from mlra.tools.shell import Bash, Python
from mlra.tools.submit import Submit
from mlra.tools.validate import Validate, Validator

CORE_TOOL_NAMES = ("bash", "python", "read_file", "write_file", "edit_file", "list_files", "submit")


def core_tools(
    jobs: JobManager | None = None,
    on_note: Callable[[ev.ExperimentNote], object] | None = None,
    validator: Validator | None = None,
) -> list[Tool[Any]]:
    """Fresh instances of bash, python, read_file, write_file, edit_file, list_files, submit,
    with the run's `jobs` the background-job tools (tools/jobs.py) after `python`, and
    with `on_note` (where a note goes: the run's log) the `note` tool (tools/notes.py),
    and with the run's `validator` the `validate` tool (tools/validate.py) before `submit`."""
    background = job_tools(jobs) if jobs is not None else []
    notes: list[Tool[Any]] = [Note(on_note)] if on_note is not None else []
    return [
        Bash(),
        Python(),
        *background,
        *notes,
        ReadFile(),
        WriteFile(),
        EditFile(),
        ListFiles(),
        *([Validate(validator)] if validator is not None else []),
        Submit(),
    ]
