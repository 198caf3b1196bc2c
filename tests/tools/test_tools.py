"""The core tools through the registry, as the agent loop calls them: real
processes and files in a local sandbox, observations checked as the model reads them."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from mlra.tools.core import core_tools
from mlra.tools.registry import (
    Tool,
    ToolContext,
    ToolOutcome,
    ToolRegistry,
    parse_arguments,
)
from mlra.tools.sandbox.base import SandboxError, SandboxSpec
from mlra.tools.sandbox.env import shown_interpreter
from mlra.tools.sandbox.local import LocalSandbox
from mlra.tools.truncate import truncate_middle

SHOWN_PREFIX = Path(shown_interpreter()).parent.parent
"""The environment a sandbox's `python` runs in, as the sandbox shows it: at its real
path, so a venv reached through a link reads so inside (tools/sandbox/env.py)."""
STATUS = re.compile(r"\[exit code (-?\d+), \d+\.\d s\]$")


class Harness:
    def __init__(self, sandbox: LocalSandbox, workspace: Path) -> None:
        self.sandbox = sandbox
        self.ws = workspace
        self.registry = ToolRegistry(core_tools())
        self.streamed: list[tuple[str, str]] = []
        self.remaining_s = float("inf")

    def ctx(self) -> ToolContext:
        return ToolContext(
            sandbox=self.sandbox,
            agent="worker",
            call_id="c1",
            on_output=lambda stream, text: self.streamed.append((stream, text)),
            default_timeout_s=60,
            remaining_s=lambda: self.remaining_s,
        )

    async def call(self, name: str, arguments: dict[str, Any] | str) -> ToolOutcome:
        args, problem = parse_arguments(arguments)
        return await self.registry.dispatch(name, args, self.ctx(), parse_error=problem)


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    ws = (tmp_path / "workspace").resolve()
    ws.mkdir()
    sandbox = LocalSandbox(ws, SandboxSpec(), isolation_mode="none")
    await sandbox.start()
    yield Harness(sandbox, ws)
    await sandbox.close()


def test_core_tool_names() -> None:
    tools = core_tools()
    assert [t.name for t in tools] == [
        "bash",
        "python",
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "submit",
    ]
    for tool in tools:
        spec = tool.spec()
        assert spec.description and spec.parameters["additionalProperties"] is False
    python = next(t for t in tools if t.name == "python").spec().parameters
    assert {"code", "script", "args", "timeout"} <= set(python["properties"])


# --- bash and python ---------------------------------------------------------------------


async def test_bash_success_streams_and_reports_status(h: Harness) -> None:
    out = await h.call("bash", {"command": "echo hello; echo warn >&2"})
    assert out.ok and out.exit_code == 0 and not out.timed_out
    assert out.output.startswith("hello\nwarn\n")
    assert STATUS.search(out.output)
    assert "".join(t for _, t in h.streamed) == "hello\nwarn\n"
    assert ("stderr", "warn\n") in h.streamed


async def test_bash_failure_and_no_output(h: Harness) -> None:
    out = await h.call("bash", {"command": "echo oops; exit 3"})
    assert not out.ok and out.exit_code == 3
    assert out.output.startswith("oops\n[exit code 3, ")
    quiet = await h.call("bash", {"command": "true"})
    assert quiet.ok and quiet.output.startswith("(no output)\n[exit code 0, ")


async def test_bash_runs_in_the_workspace(h: Harness) -> None:
    out = await h.call("bash", {"command": "pwd; echo made > made.txt"})
    assert out.output.startswith(f"{h.ws}\n")
    assert (h.ws / "made.txt").read_text() == "made\n"


async def test_bash_timeout_is_clamped_to_the_run_deadline(h: Harness) -> None:
    h.remaining_s = 1.0  # the run has a second left, though the call asks for 30
    out = await h.call("bash", {"command": "echo started; sleep 30", "timeout": 30})
    assert not out.ok and out.timed_out
    # The run's time limit ended it, not a time-out of its own the agent could raise.
    assert (
        out.output
        == "started\n[the run's time limit ended this command after 1.0 s; it was killed]"
    )


async def test_python_code_runs_from_stdin(h: Harness) -> None:
    before = sorted(p.name for p in h.ws.iterdir())
    out = await h.call(
        "python",
        {"code": "import sys\nprint('hi', sys.argv[1:], sys.prefix)", "args": ["a", "b"]},
    )
    assert out.ok, out.output
    assert out.output.startswith(f"hi ['a', 'b'] {SHOWN_PREFIX}\n")
    assert sorted(p.name for p in h.ws.iterdir()) == before  # no temp file left behind


async def test_python_script_with_args(h: Harness) -> None:
    (h.ws / "tools").mkdir()
    (h.ws / "tools" / "s.py").write_text("import sys\nprint('args', sys.argv[1:])\nsys.exit(2)\n")
    out = await h.call("python", {"script": "tools/s.py", "args": ["--x", "1"]})
    assert not out.ok and out.exit_code == 2
    assert out.output.startswith("args ['--x', '1']\n[exit code 2, ")
    missing = await h.call("python", {"script": "nope.py"})
    assert not missing.ok
    assert "script 'nope.py' is not found in the workspace" in missing.output
    outside = await h.call("python", {"script": "../s.py"})
    assert not outside.ok and "outside the workspace" in outside.output


@pytest.mark.parametrize("args", [{"code": "print(1)", "script": "a.py"}, {}, {"args": ["x"]}])
async def test_python_needs_exactly_one_of_code_or_script(h: Harness, args: dict[str, Any]) -> None:
    out = await h.call("python", args)
    assert not out.ok
    assert out.output.startswith("Error: invalid arguments for python")
    assert "exactly one of `code` or `script`" in out.output


# --- read_file ---------------------------------------------------------------------------


async def test_read_file_whole_and_range(h: Harness) -> None:
    (h.ws / "notes.txt").write_text("alpha\nbeta\ngamma\ndelta\n")
    out = await h.call("read_file", {"path": "notes.txt"})
    assert out.ok
    assert out.output == (
        "[notes.txt: lines 1-4 of 4]\n     1\talpha\n     2\tbeta\n     3\tgamma\n     4\tdelta"
    )
    part = await h.call("read_file", {"path": f"{h.ws}/notes.txt", "start_line": 2, "end_line": 3})
    assert part.output == "[notes.txt: lines 2-3 of 4]\n     2\tbeta\n     3\tgamma"
    assert part.data == {"path": "notes.txt", "start_line": 2, "end_line": 3, "total_lines": 4}
    tail = await h.call("read_file", {"path": "notes.txt", "start_line": 4, "end_line": 99})
    assert tail.output == "[notes.txt: lines 4-4 of 4]\n     4\tdelta"


async def test_read_file_errors(h: Harness) -> None:
    (h.ws / "notes.txt").write_text("one line\n")
    (h.ws / "model.bin").write_bytes(b"\x00\x01" * 512)
    (h.ws / "empty.txt").write_text("")
    (h.ws / "data").mkdir()
    past = await h.call("read_file", {"path": "notes.txt", "start_line": 5})
    assert not past.ok and "start_line 5 is past the end of notes.txt (1 line)" in past.output
    binary = await h.call("read_file", {"path": "model.bin"})
    assert not binary.ok and "model.bin is a binary file (1,024 bytes)" in binary.output
    missing = await h.call("read_file", {"path": "nope.txt"})
    assert not missing.ok and "no such file: nope.txt" in missing.output
    folder = await h.call("read_file", {"path": "data"})
    assert not folder.ok and "is a directory" in folder.output
    empty = await h.call("read_file", {"path": "empty.txt"})
    assert empty.ok and empty.output == "[empty.txt: empty file]"
    zero = await h.call("read_file", {"path": "notes.txt", "start_line": 0})
    assert not zero.ok and "start_line" in zero.output


# --- write_file and edit_file ------------------------------------------------------------


async def test_write_file_creates_and_overwrites(h: Harness) -> None:
    out = await h.call("write_file", {"path": "src/pkg/mod.py", "content": "a = 1\nb = 2\n"})
    assert out.ok and out.output == "Created src/pkg/mod.py (12 bytes, 2 lines)."
    assert (h.ws / "src/pkg/mod.py").read_text() == "a = 1\nb = 2\n"
    again = await h.call("write_file", {"path": "src/pkg/mod.py", "content": "é"})
    assert again.output == "Overwrote src/pkg/mod.py (2 bytes, 1 line)."
    onto_folder = await h.call("write_file", {"path": "src", "content": "x"})
    assert not onto_folder.ok and "is a directory" in onto_folder.output


CODE = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x + 1\n\nprint(f(1))\n"


async def test_edit_file_replaces_once_and_shows_the_change(h: Harness) -> None:
    (h.ws / "m.py").write_text(CODE)
    out = await h.call(
        "edit_file",
        {
            "path": "m.py",
            "old_text": "def g(x):\n    return x + 1",
            "new_text": "def g(x):\n    return x * 2",
        },
    )
    assert out.ok, out.output
    assert (h.ws / "m.py").read_text() == CODE.replace(
        "return x + 1\n\nprint", "return x * 2\n\nprint"
    )
    assert out.output.startswith(
        "Edited m.py: replaced 2 lines at line 5 with 2 lines. Lines 2-8 now read:"
    )
    assert "     6\t    return x * 2" in out.output


async def test_edit_file_refusals_leave_the_file_alone(h: Harness) -> None:
    (h.ws / "m.py").write_text(CODE)
    twice = await h.call("edit_file", {"path": "m.py", "old_text": "return x + 1", "new_text": "y"})
    assert not twice.ok
    assert "appears 2 times in m.py (starting at lines 2, 6)" in twice.output
    assert "include more of the surrounding lines" in twice.output
    missing = await h.call(
        "edit_file", {"path": "m.py", "old_text": "print(f(2))", "new_text": "print(f(3))"}
    )
    assert not missing.ok
    assert "old_text was not found in m.py" in missing.output
    assert "closest line is 8: 'print(f(1))'" in missing.output
    indented = await h.call(
        "edit_file", {"path": "m.py", "old_text": "def f(x):\n  return x + 1", "new_text": "z"}
    )
    assert "Lines 1-2 match it except for indentation" in indented.output
    empty = await h.call("edit_file", {"path": "m.py", "old_text": "", "new_text": "x"})
    assert not empty.ok and "old_text is empty" in empty.output
    assert (h.ws / "m.py").read_text() == CODE


async def test_edit_file_with_windows_line_ends(h: Harness) -> None:
    (h.ws / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    out = await h.call("edit_file", {"path": "w.txt", "old_text": "one\ntwo", "new_text": "1\n2"})
    assert out.ok, out.output
    assert (h.ws / "w.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


# --- list_files --------------------------------------------------------------------------


async def test_list_files_tree(h: Harness) -> None:
    (h.ws / "data" / "raw" / "deep").mkdir(parents=True)
    (h.ws / "data" / "raw" / "a.csv").write_text("x" * 2048)
    (h.ws / "data" / "train.jsonl").write_text("{}\n")
    (h.ws / "empty").mkdir()
    (h.ws / "train.py").write_text("print(1)\n")
    out = await h.call("list_files", {})
    assert out.ok
    assert out.output == (
        "[.: 5 entries, depth 2]\n"
        "data/\n"
        "  raw/  (2 entries)\n"
        "  train.jsonl  3 B\n"
        "empty/  (empty)\n"
        "train.py  9 B"
    )
    deeper = await h.call("list_files", {"path": "data", "depth": 3})
    assert deeper.output == (
        "[data: 4 entries, depth 3]\nraw/\n  deep/  (empty)\n  a.csv  2.0 KiB\ntrain.jsonl  3 B"
    )
    file = await h.call("list_files", {"path": "train.py"})
    assert file.output == "train.py  9 B (a file)"
    missing = await h.call("list_files", {"path": "nope"})
    assert not missing.ok and "no such directory" in missing.output


async def test_list_files_caps_entries(h: Harness) -> None:
    for i in range(250):
        (h.ws / f"f{i:03d}.txt").write_text("")
    out = await h.call("list_files", {"depth": 1})
    assert out.output.startswith("[.: 250 entries, depth 1]\n")
    assert out.output.endswith(
        "[... 50 more entries not shown; list a subfolder or use a smaller depth]"
    )
    assert out.data["shown"] == 200


# --- submit ------------------------------------------------------------------------------


async def test_submit(h: Harness) -> None:
    (h.ws / "model").mkdir()
    out = await h.call("submit", {"path": "./model", "note": "best checkpoint"})
    assert out.ok and out.signal == "submit"
    assert out.data == {"path": "model", "note": "best checkpoint"}
    assert "Evaluation starts now" in out.output
    # With no path and no default artifact to check, nothing is submitted: an error
    # observation, and the run goes on (the controller always names the task's default).
    default = await h.call("submit", {})
    assert not default.ok and default.signal is None
    assert "names no default artifact, so nothing was submitted" in default.output
    missing = await h.call("submit", {"path": "nope"})
    assert not missing.ok and missing.signal is None
    assert "'nope' does not exist in the workspace, so nothing was submitted" in missing.output
    # A link inside the workspace to nothing is nothing, said now, while it can be fixed.
    (h.ws / "best.pt").symlink_to("checkpoints/best.pt")
    dangling = await h.call("submit", {"path": "best.pt"})
    assert not dangling.ok and dangling.signal is None
    assert (
        "'best.pt' does not exist in the workspace (it is a symbolic link to nothing), "
        "so nothing was submitted" in dangling.output
    )


# --- confinement -------------------------------------------------------------------------


async def test_file_tools_are_confined_to_the_workspace(h: Harness, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("hidden answers")
    (h.ws / "escape").symlink_to(tmp_path)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("read_file", {"path": "../secret.txt"}),
        ("read_file", {"path": str(tmp_path / "secret.txt")}),
        ("read_file", {"path": "/etc/passwd"}),
        ("read_file", {"path": "escape/secret.txt"}),
        ("write_file", {"path": "../planted.txt", "content": "x"}),
        ("write_file", {"path": "escape/planted.txt", "content": "x"}),
        ("edit_file", {"path": "escape/secret.txt", "old_text": "hidden", "new_text": "x"}),
        ("list_files", {"path": ".."}),
        ("submit", {"path": "escape/secret.txt"}),
    ]
    for name, args in calls:
        out = await h.call(name, args)
        assert not out.ok, (name, args)
        assert "is outside the workspace" in out.output, out.output
        assert "hidden answers" not in out.output
    assert not (tmp_path / "planted.txt").exists()
    assert (tmp_path / "secret.txt").read_text() == "hidden answers"


# --- dispatch errors ---------------------------------------------------------------------


class BoomArgs(BaseModel):
    pass


class Boom(Tool[BoomArgs]):
    name = "boom"
    description = "Always raises."
    Args = BoomArgs

    async def run(self, args: BoomArgs, ctx: ToolContext) -> ToolOutcome:
        raise RuntimeError("kaput")


async def test_dispatch_errors_become_observations(h: Harness) -> None:
    h.registry.add(Boom())
    unknown = await h.call("rm_rf", {})
    assert (
        not unknown.ok
        and "there is no tool named 'rm_rf'" in unknown.output
        and "bash" in unknown.output
    )
    not_json = await h.call("bash", '{"command": "ls"')
    assert not not_json.ok and "not valid JSON" in not_json.output
    not_object = await h.call("bash", '["ls"]')
    assert not not_object.ok and "must be a JSON object" in not_object.output
    wrong = await h.call("bash", {"cmd": "ls"})
    assert (
        not wrong.ok
        and "invalid arguments for bash: unknown argument 'cmd'; command: Field required"
        in wrong.output
    )
    assert "(bash takes: command, timeout)" in wrong.output
    extra = await h.call("bash", {"command": "ls", "timeout_s": 5})
    assert not extra.ok and "unknown argument 'timeout_s'" in extra.output
    wrong_type = await h.call("read_file", {"path": "x", "start_line": "first"})
    assert not wrong_type.ok and "start_line" in wrong_type.output
    boom = await h.call("boom", {})
    assert not boom.ok and "boom raised RuntimeError: kaput" in boom.output


# --- truncation --------------------------------------------------------------------------


def test_truncate_middle() -> None:
    assert truncate_middle("short", 100) == ("short", False)
    text = "".join(f"line {i:04d}\n" for i in range(1000))  # 10 chars a line
    cut, was_cut = truncate_middle(text, 1000)
    assert was_cut
    head, _, rest = cut.partition("\n[... ")
    marker, _, tail = rest.partition(" ...]\n")
    assert marker == "9,011 characters (901 lines) cut from the middle"
    assert text.startswith(head + "\n") and text.endswith("\n" + tail)
    assert head.endswith("line 0039") and tail.startswith("line 0941\n")
    assert len(head) + len(tail) + 9011 == len(text)
    one_line, _ = truncate_middle("x" * 5000, 100)
    assert one_line.startswith("x" * 40) and one_line.endswith("x" * 60)


async def test_tools_inside_bwrap_see_workspace_paths(tmp_path: Path) -> None:
    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    sandbox = LocalSandbox(ws, SandboxSpec(), isolation_mode="bwrap")
    try:
        await sandbox.start()
    except SandboxError as exc:
        pytest.skip(f"bubblewrap is missing or cannot run here: {exc}")
    h = Harness(sandbox, ws)
    out = await h.call("bash", {"command": "pwd; echo hi > /workspace/a.txt"})
    assert out.output.startswith("/workspace\n")
    read = await h.call("read_file", {"path": "/workspace/a.txt"})
    assert read.output == "[a.txt: lines 1-1 of 1]\n     1\thi"
    await sandbox.close()
