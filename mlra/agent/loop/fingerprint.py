"""A fingerprint of what the model was sent, for finding where two runs part ways.

A deterministic re-run (`--model replay:RUN`) feeds the agent the recorded
answers and compares, call by call, what the agent sends now with what it sent
then. Things that differ between any two runs without any difference in
behaviour are left out: the clock-and-budget note, command durations, when
each experiment validated, how long each attempt has run, and the run's own
folder names (its workspace, and its folder where a path names it).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import PurePath

from mlra.agent.providers.base import Message
from mlra.tools.registry import ToolSpec

_STATUS = re.compile(r"^\[status\] .*$", re.MULTILINE)
_DURATION = re.compile(r", [\d.,]+ s\]")
"""The `[exit code 0, 1.2 s]` line that closes a command's output."""
_RUN_TIME = re.compile(r"\(\d[\dhms]* into the run\)")
"""When an experiment validated, in the supervisor's experiments table (agent/record/experiments.py)."""
_ATTEMPT_TIME = re.compile(r"(\(a\d+(?: > a\d+)*\)|from the starter), \d[\dhms.]*: ")
"""How long each attempt ran, in the search's table (agent/record/attempt_tree.py `render`),
after its lineage or, a draft's, `from the starter`."""


RUN = "<run>"
"""What the run's folder becomes in a fingerprint."""


def run_names(workdir: str | None, workspace: str) -> list[tuple[str, str]]:
    """The names a run's fingerprints leave out, with what each becomes, longest first:
    its workspace (as the sandbox shows it and as it is on the host) and its folder, the
    workspace's parent, named in full or from its runs folder on (`runs/ID`). Made the same
    way for a recording (from its `run_started`) and for the run that replays it."""
    folder = PurePath(workspace).parent
    pairs = [(workspace, "<workspace>")]
    # Never a bare name (a relative `answer/workspace`): that is the id as a word.
    if len(folder.parts) > 1:
        pairs.append((str(folder), RUN))
    if folder.parent.name:
        pairs.append((f"{folder.parent.name}/{folder.name}", RUN))
    if workdir:
        pairs.insert(0, (workdir, "<workspace>"))
    return sorted(pairs, key=lambda p: -len(p[0]))


def _as_name(path: str) -> re.Pattern[str]:
    """A run's folder where it is a whole name in the text (`runs/ID/jobs`), never part of
    another (`runs/ID2`). The id alone was left out before, wherever it stood: a run named
    `answer` (`--run-id`) lost every `answer` from its fingerprints, and a replay of it
    under another id read `write the answer` as a different request."""
    return re.compile(rf"(?<![\w.-]){re.escape(path)}(?![\w-]|\.[\w-])")


def by_the_old_rule(
    names: Sequence[tuple[str, str]], recorded: Sequence[tuple[str, str]] = ()
) -> list[tuple[str, str]]:
    """`run_names` as runs recorded before 2026-12-01 had them, to be used with
    `whole_names=False`: the run's id left out wherever it stood, as a word too (an
    attempt's `[attempt a1]` read `[attempt <run>]`). A request that differs from such a
    recording's is compared so too, or every attempt of an older search's recording
    diverged at its first model call; with the `recorded` run's id left out as well, as
    its recording left it out (a run named `answer` replays under another name)."""
    pairs = [(old, new) for old, new in names if new != RUN]
    for folders in (names, recorded):
        paths = [old for old, new in folders if new == RUN]
        if paths:
            pairs.append((PurePath(max(paths, key=len)).name, RUN))
    return sorted(set(pairs), key=lambda p: (-len(p[0]), p[0]))


def normalize(
    text: str, replacements: Iterable[tuple[str, str]] = (), *, whole_names: bool = True
) -> str:
    """`text` with what differs between two runs of the same thing left out. `whole_names`:
    the run's folder only where it is a whole name (`by_the_old_rule` says when not)."""
    text = _STATUS.sub("[status]", text)
    text = _DURATION.sub(", _ s]", text)
    text = _RUN_TIME.sub("(_ into the run)", text)
    text = _ATTEMPT_TIME.sub(r"\1, _: ", text)
    for old, new in replacements:
        if not old:
            continue
        if new == RUN and whole_names:
            text = _as_name(old).sub(new, text)
        else:
            text = text.replace(old, new)
    return text


def request_fingerprint(
    system: str,
    messages: list[Message],
    tools: list[ToolSpec],
    replacements: Iterable[tuple[str, str]] = (),
    *,
    whole_names: bool = True,
) -> tuple[str, list[str]]:
    """(hash of the whole request, the normalized messages as text for a diff)."""
    subs = list(replacements)
    norm = partial(normalize, whole_names=whole_names)
    rendered = [norm(system, subs), ",".join(sorted(t.name for t in tools))]
    for m in messages:
        calls = [
            {
                "name": c.name,
                "arguments": c.arguments,
                "raw": None if c.arguments else c.raw_arguments,
            }
            for c in m.tool_calls
        ]
        rendered.append(
            f"{m.role}|{m.tool_name or ''}|{m.is_error}|{norm(m.content, subs)}|"
            + norm(json.dumps(calls, sort_keys=True, ensure_ascii=False), subs)
        )
    # surrogatepass: a name that is not UTF-8 reaches the messages as lone surrogates
    # (os.fsdecode), which strict UTF-8 refuses; this encodes them as they are, and
    # any text without them exactly as before (the same digest for the same request).
    digest = hashlib.sha256("\x1e".join(rendered).encode("utf-8", "surrogatepass")).hexdigest()
    return digest[:32], rendered
