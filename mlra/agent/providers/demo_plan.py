"""What `--model demo` (agent/providers/demo.py) does for a task: its words, the files it
reads, the reference recipe's commands with the run's seed, an attempt's variant and the
changes the user asked for in words the demo can apply put in, and the artifact."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlra.agent.providers.base import Message
from mlra.agent.providers.result_notes import REJECTED

if TYPE_CHECKING:
    from mlra.tasks.spec import TaskSpec

SCRIPT_FILE = Path(__file__).with_name("demo_script.toml")
ATTEMPT = re.compile(r"\[attempt (\w+?)(\d+)\]")
RELAYED = "The user asked: "
"""How the demo supervisor passes on to its worker what the user told it (the worker
reads the line as the user's words, as it reads the user's own messages)."""
_FLAG = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)(?:=|\s+)([^\s,;'\"`]+)")
"""`--steps 40` or `--steps=40` in what the user wrote."""
_COUNT = re.compile(r"(?<![\w./-])(\d+(?:\.\d+)?(?:e-?\d+)?)\s+([A-Za-z][\w-]*)")
"""`40 steps` in what the user wrote: `--steps 40`, where the command has a `--steps`."""
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
"""The only values the demo puts into a command: a number for a number (`--steps to 40`
set `--steps to`, and `--steps $(id)` put the user's text into the shell)."""


@cache
def script() -> dict[str, Any]:
    return tomllib.loads(SCRIPT_FILE.read_text(encoding="utf-8"))


@dataclass
class Plan:
    """What the demo does for one task: its words (the default's, overlaid by the task's
    own entry), the files it reads, the recipe's commands and the artifact."""

    words: dict[str, Any]
    look: list[str] = field(default_factory=list)
    steps: list[tuple[str, str]] = field(default_factory=list)
    """(title, command) of each of the recipe's steps, variables and asked changes in."""
    values: dict[str, str] = field(default_factory=dict)
    artifact: str = "submission"
    asked: dict[str, str] = field(default_factory=dict)
    """The flags the user asked to change (`--steps` -> `40`) that a step's command has."""
    said: list[str] = field(default_factory=list)
    """What the user said to this agent, oldest first (`user_words`)."""

    def say(self, key: str, **values: object) -> str:
        text = str(self.words.get(key, ""))
        for name, value in {**self.values, **values}.items():
            text = text.replace("{" + name + "}", str(value))
        return text

    @property
    def commands(self) -> str:
        return " && ".join(command for _, command in self.steps)

    def changes(self, text: str) -> str:
        """The asked changes that `text` states, as `--steps 40, --lr 1e-3`; '' for none."""
        mine = asked_in([text], self.commands)
        return ", ".join(f"{flag} {value}" for flag, value in mine.items())


def user_words(messages: list[Message]) -> list[str]:
    """What the user said to this agent, oldest first: its messages (`[message from the
    user]`, or passed on by the supervisor), and the message of each call it rejected."""
    said: list[str] = []
    for m in messages:
        if m.role == "user":
            said += re.findall(r"\[message from the user\] (.*)", m.content)
            said += re.findall(re.escape(RELAYED) + "(.*)", m.content)
        elif m.role == "tool" and m.content.startswith(REJECTED):
            said.append(m.content[len(REJECTED) :].strip())
    return [s.strip() for s in said if s.strip()]


def asked_in(said: list[str], commands: str) -> dict[str, str]:
    """The flags of `commands` that `said` gives a new number, the latest message winning.
    Within one, `--steps 40` beats `40 steps` and the first mention the rest (`use 40
    steps instead of 100 steps`, `--steps 40 (not --steps 100)`). Only a flag the
    commands have with a number is changed, and only to a number: the demo does not
    guess more."""
    asked: dict[str, str] = {}
    for text in said:
        found = [(flag, value) for flag, value in _FLAG.findall(text)]
        found += [(f"--{name}", value) for value, name in _COUNT.findall(text)]
        mine: dict[str, str] = {}
        for flag, value in found:
            value = value.rstrip(".!?),")
            current = _value_of(commands, flag)
            if flag in mine or current is None or not _NUMBER.fullmatch(current):
                continue
            if _NUMBER.fullmatch(value):
                mine[flag] = value
        asked.update(mine)
    return asked


def _value_of(command: str, flag: str) -> str | None:
    """The value `flag` has in `command`; None where it has none."""
    found = re.search(rf"(?<!\S){re.escape(flag)}(?:=|\s+)(\S+)", command)
    return found.group(1) if found else None


def with_changes(command: str, asked: dict[str, str]) -> str:
    for flag, value in asked.items():
        command = re.sub(
            rf"(?<!\S)({re.escape(flag)})(=|\s+)\S+",
            lambda m, value=value: m.group(1) + m.group(2) + value,
            command,
        )
    return command


def task_refusal(spec: str, task: TaskSpec, *, new_run: str | None = None) -> str | None:
    """Why the model `spec` (the demo's) cannot run `task`, if it cannot: the demo knows a
    task by its prompt's title among the built-in tasks, as a model reads the prompt, and
    follows that task's reference recipe. On any other task it looked at the files, asked
    for a `submission` nothing writes and stopped with nothing submitted (an MLAgentBench
    folder: "no_tool_calls" after 4 turns), which read as mlra failing on the task.
    `new_run` (the TASK to give `mlra run`): a fork or resume going on, which cannot
    switch to the baseline agent (its log is another kind), so a new run is advised."""
    from mlra.agent.providers.table import DEMO, spec_entry
    from mlra.tasks.spec import builtin_task_dirs, load_task

    if spec_entry(spec) != f"{DEMO}:":
        return None
    known = [t for d in builtin_task_dirs() if (t := load_task(d)).baseline.steps]
    if any(t.title.strip() == task.title.strip() for t in known):
        return None  # found as the demo finds it (`task_named_in`): a copy of one too
    if new_run is not None:
        instead = "give a real model (--model NAME)" + (
            f", or start a new run: mlra run {new_run} --model baseline"
            if task.baseline.steps
            else ""
        )
    elif task.baseline.steps:
        instead = "run its recipe with --model baseline, or give a real model"
    else:
        instead = "give a real model"
    return (
        f"--model demo follows a built-in task's reference recipe, and {task.name} is not "
        f"one it knows (it knows {', '.join(t.name for t in known)}): {instead}"
    )


def task_named_in(messages: list[Message]) -> TaskSpec | None:
    """The built-in task whose prompt (`# TITLE` first) the history holds."""
    from mlra.tasks.spec import builtin_task_dirs, load_task

    first = next((m.content for m in messages if m.role == "user"), "")
    title = first.lstrip().splitlines()[0].removeprefix("# ").strip() if first.strip() else ""
    for folder in builtin_task_dirs():
        try:
            task = load_task(folder)
        except Exception:  # a task that does not load is not this one
            continue
        if task.title.strip() == title:
            return task
    return None


def plan_for(messages: list[Message], seed: int | None) -> Plan:
    task = task_named_in(messages)
    data = script()
    own: dict[str, Any] = data.get("tasks", {}).get(task.name, {}) if task else {}
    words = {**data["default"], **own}
    plan = Plan(words=words, said=user_words(messages))
    if task is None:
        return plan
    starter = [task.root / p for p in task.files.starter]
    plan.look = [
        name for name in words.get("look", []) if any((s / name).is_file() for s in starter)
    ]
    recipe = task.baseline
    values = {**recipe.vars, **own.get("vars", {})}
    found = next(
        (f for m in messages if m.role == "user" and (f := ATTEMPT.search(m.content))), None
    )
    if found:  # a search's attempt: one change per attempt, in the script's order
        variants = own.get("attempt_variants") or recipe.variants or [{}]
        values.update(variants[(int(found.group(2)) - 1) % len(variants)])
        values["attempt"] = found.group(1) + found.group(2)
    values.setdefault("seed", str(seed if seed is not None else 0))
    commands = []
    for step in recipe.steps:
        command = step.command
        for name, value in values.items():
            command = command.replace("{" + name + "}", value)
        commands.append(command)
    plan.asked = asked_in(plan.said, " && ".join(commands))
    for flag, value in plan.asked.items():  # the words say the value that runs
        if flag[2:] in values:
            values[flag[2:]] = value
    plan.values = values
    plan.steps = [
        (step.title, with_changes(command, plan.asked))
        for step, command in zip(recipe.steps, commands, strict=True)
    ]
    plan.artifact = recipe.submit or task.evaluator.artifact or "submission"
    return plan
