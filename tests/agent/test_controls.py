"""Breakpoint rules as a user writes them on the command line or in the console."""

from __future__ import annotations

import pytest

from mlra.agent.loop.controls import Breakpoint


@pytest.mark.parametrize(
    ("rule", "tool", "args", "hit"),
    [
        ("*", "bash", {"command": "ls"}, True),
        ("bash", "bash", {"command": "ls"}, True),
        ("bash", "python", {"code": "1"}, False),
        ("bash:rm -rf", "bash", {"command": "cd x && rm -rf build"}, True),
        ("bash:rm -rf", "bash", {"command": "rm -r build"}, False),
        (":pip install", "python", {"code": "os.system('pip install x')"}, True),
        ("*:pip install", "bash", {"command": "pip install torch"}, True),
        ("bash:*curl*|*sh*", "bash", {"command": "ls"}, False),
        ("write_*", "write_file", {"path": "a"}, True),
    ],
)
def test_breakpoint_rules(rule: str, tool: str, args: dict[str, str], hit: bool) -> None:
    assert Breakpoint.parse(rule).matches(tool, args) is hit
