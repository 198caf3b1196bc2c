"""The README and the documentation cannot name what is not there.

Every `mlra SUB-COMMAND ... --flag` the pages show (in code blocks and inline code) must
be a sub-command and an option of the real command line (console/cli/cli.py's parser), and
every `--flag` named on its own must be one of mlra's or one of the few other programs'
the pages name (pytest, the benches). Every picture in docs/images/ must be, byte for
byte, the SVG its snapshot test renders (tests/console/docs_screens.py), so the docs
never show a console that is not the product's. Fast: no process is started.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlra.console.cli.cli import build_parser
from tests.console.docs_screens import BROWSER_PICTURES, IMAGES, SCREENS, snapshot_of

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Flags the pages name alone that belong to another program, with the program.
OTHER_PROGRAMS_FLAGS = {
    "--snapshot-update": "pytest-textual-snapshot",
    "--pdb": "pytest",
    "--threads": "the offline tasks' train.py",
    "--validation": "the offline tasks' build_data.py",
    "--pip": "bench/task_env_build.py",
    "--rounds": "bench/key_latency.py, bench/fetch_cost.py",
    "--cluster": "bench/batch_overhead.py",
    "--no-ray": "bench/batch_overhead.py",
    "--keep": "bench/search_attempts.py",
    "--list": "bench/gpu_check.py",
    "--only": "bench/gpu_check.py",
    "--device": "bench/gpu_check.py (its rehearsal on the CPU)",
    "--no-index": "pip (docs/contributing.md, On a lent GPU machine)",
    "--ctx-size": "llama.cpp's llama-server (docs/agents.md)",
    "--no-repack": "llama.cpp's llama-server (docs/agents.md)",
    "--disable-host-loopback": "slirp4netns (docs/security.md)",
    "--generate-budget": "math-autoformalization's hidden/evaluate.py",
    "--lean-budget": "math-autoformalization's hidden/evaluate.py",
    "--lean-workers": "math-autoformalization's hidden/evaluate.py",
    "--lean-timeout": "math-autoformalization's hidden/evaluate.py",
}
SEPARATORS = {"|", "||", "&&", ";", "&"}


@dataclass(frozen=True)
class Shown:
    page: str
    text: str


def code_of(markdown: str) -> Iterator[str]:
    """The fenced code blocks' lines, then the inline code spans of the prose."""
    prose: list[str] = []
    fence: str | None = None
    for line in markdown.splitlines():
        stripped = line.strip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            else:
                yield line
            continue
        prose.append(line)
    # A span may wrap over a line break in a paragraph.
    for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", "\n".join(prose)):
        yield span.replace("\n", " ").replace("\\|", "|")


def shown() -> Iterator[Shown]:
    for page in PAGES:
        for text in code_of(page.read_text()):
            yield Shown(page.relative_to(ROOT).as_posix(), text)


def words(text: str) -> list[str]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote in prose: whitespace is enough
        return text.split()


def commands(text: str) -> Iterator[list[str]]:
    """Each `mlra ...` command in a line, up to a pipe, `&&` or `;`."""
    current: list[str] | None = None
    for word in words(text):
        if word in SEPARATORS:
            if current:
                yield current
            current = None
        elif word == "mlra" and current is None:
            current = []
        elif current is not None:
            current.append(word)
    if current:
        yield current


def flag(word: str) -> str | None:
    """`--name` (or `-x`) as the parser knows it, from a word as a page writes it:
    `[--attempts-parallel`, `--model=replay:RUN`, `--json;`."""
    word = word.strip("[](),.;:'\"")
    if re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", word):
        return word.split("=", 1)[0]
    if re.fullmatch(r"-[a-zA-Z]", word):
        return word
    return None


def sub_commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings}


def all_options(parser: argparse.ArgumentParser) -> set[str]:
    found = options(parser)
    for sub in sub_commands(parser).values():
        found |= all_options(sub)
    return found


def problems_of(command: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """What a shown `mlra` command names that the parser does not have."""
    if not command or command[0].startswith("-"):
        known, rest = options(parser), command
        where = "mlra"
    else:
        subs = sub_commands(parser)
        if command[0] not in subs:
            return [f"mlra {command[0]}: no such sub-command (mlra has {', '.join(subs)})"]
        sub, rest, where = subs[command[0]], command[1:], f"mlra {command[0]}"
        known = options(parser) | options(sub)
        nested = sub_commands(sub)
        for word in rest:  # `mlra X Y --flag` where Y is a sub-command of X
            if word in nested:
                known |= options(nested[word])
                break
    return [
        f"{where} {name}: no such option"
        for name in filter(None, map(flag, rest))
        if name not in known
    ]


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser()


def test_every_mlra_command_the_docs_show_exists(parser: argparse.ArgumentParser) -> None:
    checked = 0
    wrong: list[str] = []
    for item in shown():
        for command in commands(item.text):
            checked += 1
            wrong += [f"{item.page}: `{item.text}`: {p}" for p in problems_of(command, parser)]
    assert not wrong, "\n".join(wrong)
    assert checked > 50  # the pages were read: they show far more commands than this


def test_every_flag_the_docs_name_alone_exists(parser: argparse.ArgumentParser) -> None:
    known = all_options(parser) | set(OTHER_PROGRAMS_FLAGS)
    wrong = [
        f"{item.page}: `{item.text}`"
        for item in shown()
        if item.text.startswith("--")
        and (name := flag(words(item.text)[0])) is not None
        and name not in known
    ]
    assert not wrong, "flags no mlra command has:\n" + "\n".join(wrong)


def test_the_checks_catch_what_is_not_there(parser: argparse.ArgumentParser) -> None:
    """The check itself: a made-up sub-command or flag is caught, a real one is not."""
    (run,) = commands("python3 -m venv .venv && mlra run tiny-lm --model baseline --no-tui")
    assert problems_of(run, parser) == []
    (bad_flag,) = commands("mlra run tiny-lm --no-such-flag | head  # a comment --neither")
    assert problems_of(bad_flag, parser) == ["mlra run --no-such-flag: no such option"]
    (bad_command,) = commands("mlra frobnicate runs/x")
    assert problems_of(bad_command, parser)[0].startswith("mlra frobnicate: no such sub-command")
    # a flag of another sub-command is not this one's
    (misplaced,) = commands("mlra replay runs/x --seeds 3")
    assert problems_of(misplaced, parser) == ["mlra replay --seeds: no such option"]


def test_each_docs_picture_is_its_snapshot_byte_for_byte() -> None:
    drifted = [
        f"docs/images/{image} differs from {snapshot_of(nodeid).relative_to(ROOT)}"
        for image, nodeid in SCREENS.items()
        if (IMAGES / image).read_bytes() != snapshot_of(nodeid).read_bytes()
    ]
    assert not drifted, "\n".join(drifted) + "\nregenerate them: python docs/screens.py --copy-only"


def test_every_picture_in_the_docs_comes_from_a_snapshot_test_and_is_shown() -> None:
    assert {p.name for p in IMAGES.iterdir()} == set(SCREENS) | set(BROWSER_PICTURES)
    text = "\n".join(page.read_text() for page in PAGES)
    unshown = [image for image in [*SCREENS, *BROWSER_PICTURES] if f"images/{image}" not in text]
    assert not unshown, f"pictures no page shows: {unshown}"
