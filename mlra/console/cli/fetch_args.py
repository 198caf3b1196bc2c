"""The user's word on the research tools: which a run has, and what they may fetch.

From the flags (`--tools`, `--allow-host`) and mlra's config file (`$MLRA_CONFIG`,
else `$XDG_CONFIG_HOME/mlra/config.toml`, else `~/.config/mlra/config.toml`), whose
`[fetch]` table holds `allow_hosts`, `private_hosts` and `ca_bundle`. Both are the
user's, never the agent's: the file lives outside any sandbox, and what was used is
recorded in the run's config. Bad input is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from mlra.console.text.args import UsageError
from mlra.tools.research_table import RESEARCH_TOOLS

if TYPE_CHECKING:
    from mlra.tools.fetch.policy import FetchSettings

TOOL_CHOICES = tuple(RESEARCH_TOOLS)
"""tools/research_table.py's names, in its order: all of them, a run's default."""


def add_fetch_args(parser: argparse.ArgumentParser, *, whose: str = "the run") -> None:
    parser.add_argument(
        "--tools",
        type=tools_list,
        metavar="LIST",
        help=f"the research tools {whose} has: {', '.join(RESEARCH_TOOLS)}, "
        f"{'both' if len(RESEARCH_TOOLS) == 2 else 'several'} ({','.join(RESEARCH_TOOLS)}: "
        "the default) or none (a task that forbids outside code)",
    )
    parser.add_argument(
        "--allow-host",
        dest="allow_hosts",
        action="append",
        type=host_entry,
        default=None,
        metavar="HOST[:PORT]",
        help="a host the research tools may fetch from over https, beside github.com and "
        "arxiv.org (repeatable; also [fetch] allow_hosts in mlra's config file)",
    )


def tools_list(text: str) -> list[str]:
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if names == ["none"]:
        return []
    unknown = [n for n in names if n not in RESEARCH_TOOLS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: name research tools from {', '.join(RESEARCH_TOOLS)}, or none"
        )
    return [n for n in RESEARCH_TOOLS if n in names]


def host_entry(text: str) -> str:
    from mlra.tools.fetch.policy import split_host

    try:
        split_host(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()


def config_path() -> Path:
    chosen = os.environ.get("MLRA_CONFIG")
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "mlra" / "config.toml"


def fetch_settings(allow_hosts: list[str] | None) -> FetchSettings:
    """The config file's `[fetch]` table with the flags' hosts added."""
    from pydantic import ValidationError

    from mlra.tools.fetch.policy import FetchSettings, split_host

    path = config_path()
    table: dict[str, object] = {}
    if path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise UsageError(f"mlra's config file {path} cannot be read: {exc}") from None
        raw = data.get("fetch", {})
        if not isinstance(raw, dict):
            raise UsageError(f"{path}: [fetch] must be a table")
        table = raw
    try:
        settings = FetchSettings.model_validate(table)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"{path}: [fetch] {where}: {first['msg']}") from None
    for entry in [*settings.allow_hosts, *settings.private_hosts]:
        try:
            split_host(entry)
        except ValueError as exc:
            raise UsageError(f"{path}: [fetch] {exc}") from None
    if settings.ca_bundle is not None:
        bundle = Path(settings.ca_bundle).expanduser()
        if not bundle.is_file():
            raise UsageError(f"{path}: [fetch] ca_bundle {bundle} is not a file")
        settings.ca_bundle = str(bundle.resolve())
    for host in allow_hosts or []:
        if host not in settings.allow_hosts:
            settings.allow_hosts.append(host)
    return settings
