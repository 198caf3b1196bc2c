"""The tools every acting agent gets; their names are a contract with the prompts."""

from __future__ import annotations

from typing import Any

from mlra.tools.files import EditFile, ListFiles, ReadFile, WriteFile
from mlra.tools.registry import Tool
from mlra.tools.shell import Bash, Python
from mlra.tools.submit import Submit

CORE_TOOL_NAMES = ("bash", "python", "read_file", "write_file", "edit_file", "list_files", "submit")


def core_tools() -> list[Tool[Any]]:
    """Fresh instances of bash, python, read_file, write_file, edit_file, list_files, submit."""
    return [Bash(), Python(), ReadFile(), WriteFile(), EditFile(), ListFiles(), Submit()]
