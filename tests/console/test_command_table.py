"""The command line's table of commands (console/cli/cli.py): `mlra --help` lists every
command from the table without importing a command's module, `mlra COMMAND` imports
only its own, and a new command is one module and one row (docs/contributing.md)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from mlra.console.cli import cli
from mlra.console.cli.cli import COMMANDS, build_parser, main

HELLO = ("tests.console.tiny_command:add_hello_command", "greet someone")


def _command_modules_after(argv: list[str]) -> list[str]:
    """The command modules (console/cli/*, cli.py aside) a fresh `mlra ARGV` imports."""
    code = (
        "import sys\n"
        "from mlra.console.cli.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules\n"
        "    if m.startswith('mlra.console.cli.') and m != 'mlra.console.cli.cli'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return eval(proc.stdout.strip().splitlines()[-1])


def test_help_lists_every_command_without_importing_one() -> None:
    assert _command_modules_after(["--help"]) == []


def test_a_command_imports_its_own_module_only() -> None:
    rows = {target.partition(":")[0] for target, _ in COMMANDS.values()}
    assert _command_modules_after(["share", "--help"]) == ["mlra.console.cli.share_cli"]
    # resume and fork are two rows of one module, which imports no other command's
    assert rows & set(_command_modules_after(["fork", "--help"])) == {"mlra.console.cli.resume_cli"}


def test_every_row_builds_the_command_it_names(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()  # every row built, as the docs' checks read it
    (commands,) = [a for a in parser._actions if isinstance(a, cli.LazyCommands)]
    assert list(commands.choices) == list(COMMANDS) and not commands.unbuilt
    for name, parsed in commands.choices.items():
        assert parsed.prog == f"mlra {name}"
        assert callable(parsed.get_default("func")), name
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out
    for name, (_, line) in COMMANDS.items():
        assert f"{name} " in listed and line.split()[0] in listed


def test_a_new_command_is_one_module_and_one_row(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(COMMANDS, "hello", HELLO)
    assert main(["hello", "Ada", "--shout"]) == 0
    assert capsys.readouterr().out == "HELLO, ADA\n"
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    assert re.search(r"\n +hello +greet someone\n", capsys.readouterr().out)
    with pytest.raises(SystemExit):
        main(["hello", "--help"])
    assert "Greet someone, by name." in capsys.readouterr().out
    # bad input from the new command is the CLI's one line and exit 2, like any other's
    assert main(["hello", " "]) == 2
    assert capsys.readouterr().err == "mlra: hello: a name, please\n"


def test_a_row_that_adds_no_such_command_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(COMMANDS, "greet", HELLO)  # the module adds `hello`, not `greet`
    with pytest.raises(RuntimeError, match="added no `greet` command"):
        main(["greet", "Ada"])
