"""`mlra hello`: the smallest command module, added to the command table by
tests/console/test_command_table.py as docs/contributing.md's recipe says."""

from __future__ import annotations

import argparse
from typing import Any

from mlra.console.text.args import EXIT_OK, UsageError


def add_hello_command(sub: Any) -> None:
    hello = sub.add_parser("hello", description="Greet someone, by name.")
    hello.add_argument("name", help="whom to greet")
    hello.add_argument("--shout", action="store_true", help="in capitals")
    hello.set_defaults(func=cmd_hello)


def cmd_hello(args: argparse.Namespace) -> int:
    if not args.name.strip():
        raise UsageError("hello: a name, please")
    line = f"hello, {args.name}"
    print(line.upper() if args.shout else line)
    return EXIT_OK
