"""How far small local models go as mlra's agents, counted from their runs' logs.

Reads run folders (each with its events.jsonl and result.json, as `mlra run` leaves them)
and prints, a row a run and then a row a model and way of working (the supervisor,
or `--agent worker`): the model's turns, the share of them that made a valid tool
call, the share written as text (read by agent/providers/text_calls.py; a search's
attempts' turns counted with its run's), whether the
supervisor handed the worker a subtask, whether the run gave the worker the whole task
itself (`worker_alone`), how the run ended and whether it solved the task.

A turn makes a valid call when it made at least one call and none of its calls was
refused before it ran: a tool that does not exist, arguments that are not JSON, or
arguments the tool does not take. A call that ran and failed (a command's exit 1)
was a valid call. Summaries and reviews are not turns.

    python bench/small_models.py RUN_DIR_OR_RUNS_DIR ...

The runs are made by hand against a real server (docs/agents.md, "Checking against a
real llama-server"); the figures are in docs/measurements.md.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlra import events as ev
from mlra.agent.record.eventlog import read_events

REFUSED = ("there is no tool named", "invalid arguments for", "the arguments are not valid JSON")
"""How the tool registry (tools/registry.py) answers a call it cannot run."""


@dataclass
class Run:
    name: str
    model: str
    way: str
    turns: int = 0
    valid: int = 0
    text: int = 0
    subtasks: int = 0
    worker_alone: bool = False
    ending: str = ""
    solved: bool = False
    by_agent: dict[str, list[int]] = field(default_factory=dict)
    """Turns and valid turns, by agent."""


def refused(result: ev.ToolResult) -> bool:
    words = result.error or result.output
    return not result.ok and any(r in words for r in REFUSED)


def count_turns(run: Run, events: list[ev.Event], prefix: str) -> None:
    """Add a log's model turns to `run`, by agent (named with `prefix`)."""
    refused_calls = {e.call_id for e in events if isinstance(e, ev.ToolResult) and refused(e)}
    for event in events:
        if not isinstance(event, ev.ModelCall) or event.purpose != "turn":
            continue
        run.turns += 1
        counts = run.by_agent.setdefault(prefix + event.agent, [0, 0])
        counts[0] += 1
        calls = event.tool_calls
        if calls and not any(c.get("id") in refused_calls for c in calls):
            run.valid += 1
            counts[1] += 1
        if any(c.get("from_text") for c in calls):
            run.text += 1


def read_run(folder: Path) -> Run | None:
    path = folder / "events.jsonl"
    if not path.is_file():
        return None
    events = read_events(path)
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    if started is None:
        return None
    way = str(started.config.get("agent") or "supervisor")
    if started.config.get("search", "none") != "none":
        way = "search"
    run = Run(folder.name, started.model, way)
    count_turns(run, events, "")
    # A search's attempts are workers with logs of their own.
    for log in sorted(folder.glob("attempts/*/events.jsonl")):
        count_turns(run, read_events(log), "attempts' ")
    for event in events:
        if isinstance(event, ev.SubtaskStarted):
            run.subtasks += 1
        elif isinstance(event, ev.WorkerAlone):
            run.worker_alone = True
        elif isinstance(event, ev.RunFinished):
            run.ending = event.reason
    result = folder / "result.json"
    if result.is_file():
        data = json.loads(result.read_text())
        top = data.get("top_score")
        run.solved = data.get("score") is not None and top is not None and data["score"] == top
    return run


def folders(args: list[str]) -> list[Path]:
    found: list[Path] = []
    for arg in args:
        path = Path(arg)
        if (path / "events.jsonl").is_file():
            found.append(path)
        else:
            found += sorted(p.parent for p in path.glob("*/events.jsonl"))
    return found


def share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "0/0"


def main(args: list[str]) -> int:
    if not args:
        print("usage: python bench/small_models.py RUN_DIR_OR_RUNS_DIR ...")
        return 2
    runs = [r for f in folders(args) if (r := read_run(f)) is not None]
    print(
        "run | model | way | turns | valid calls | as text | by agent (valid/turns) | "
        "subtasks | worker alone | ended | solved"
    )
    for r in runs:
        agents = ", ".join(f"{a} {v}/{t}" for a, (t, v) in r.by_agent.items())
        print(
            f"{r.name} | {r.model} | {r.way} | {r.turns} | {share(r.valid, r.turns)} | "
            f"{r.text} | {agents} | {r.subtasks} | {'yes' if r.worker_alone else 'no'} | "
            f"{r.ending} | {'yes' if r.solved else 'no'}"
        )
    groups: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for r in runs:
        groups[(r.model, r.way)].append(r)
    print()
    print(
        "model | way | runs | valid calls | supervisor handed a subtask | worker alone | "
        "submitted | solved"
    )
    for (model, way), rs in sorted(groups.items()):
        turns = sum(r.turns for r in rs)
        valid = sum(r.valid for r in rs)
        handed = sum(1 for r in rs if way == "supervisor" and r.subtasks and not r.worker_alone)
        alone = sum(1 for r in rs if r.worker_alone)
        submitted = sum(1 for r in rs if r.ending == "submitted")
        solved = sum(1 for r in rs if r.solved)
        print(
            f"{model} | {way} | {len(rs)} | {share(valid, turns)} | "
            f"{handed if way == 'supervisor' else '-'} | {alone} | {submitted} | {solved}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
