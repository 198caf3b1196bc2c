"""The tools every acting agent gets; their names are a contract with the prompts."""

from __future__ import annotations

from typing import Any

from mlra.tools.files import EditFile, ListFiles, ReadFile, WriteFile
from mlra.tools.jobs import JobManager, job_tools
from mlra.tools.registry import Tool
from mlra.tools.shell import Bash, Python
from mlra.tools.submit import Submit

CORE_TOOL_NAMES = ("bash", "python", "read_file", "write_file", "edit_file", "list_files", "submit")


def core_tools(jobs: JobManager | None = None) -> list[Tool[Any]]:
    """Fresh instances of bash, python, read_file, write_file, edit_file, list_files, submit,
    and with the run's `jobs` the background-job tools (tools/jobs.py) after `python`."""
    background = job_tools(jobs) if jobs is not None else []
    return [
        Bash(),
        Python(),
        *background,
        ReadFile(),
        WriteFile(),
        EditFile(),
        ListFiles(),
        Submit(),
    ]
