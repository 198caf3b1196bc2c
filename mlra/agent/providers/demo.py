"""`--model demo`: a scripted supervisor and worker, so that a newcomer can try the
console's controls (pause, step, breakpoints, approving or editing an action, talking to
the agent, forking, a search's attempts) with no API key and no model server.

It is a product feature, not a test double: the suite's provider tests keep using the
loopback servers of tests/fakes, which speak the vendors' real HTTP APIs. This one speaks
no API at all; it stands behind the same provider seam as the vendors' (ModelProvider),
so its turns are real tool calls that go through the run's real tool registry, sandbox,
breakpoints and log.

Each answer is worked out from the request alone (the role its system prompt names, the
calls its history holds, the latest results), never from state kept between calls: an
edited call's result is what it reads next, a message from the user is acknowledged in the
next thought, and a forked or resumed run goes on where its history stands. The words and
the per-task recipes are package data (demo_script.toml); the commands are the task's own
reference recipe (`[baseline]` in its task.toml), shortened for tiny-lm, with the run's
seed put in and, in a search's attempts, one hyperparameter varied per attempt.
Token counts are estimates from the characters, said as such; calls cost nothing.
"""

from __future__ import annotations

import asyncio
import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlra.agent.providers.base import (
    Message,
    ModelProvider,
    ModelResponse,
    TextCallback,
    ToolCallRequest,
    estimated_usage,
)

if TYPE_CHECKING:
    from mlra.agent.providers.table import ProviderRequest
    from mlra.tasks.spec import TaskSpec
    from mlra.tools.registry import ToolSpec

SCRIPT_FILE = Path(__file__).with_name("demo_script.toml")
THINK_S = 0.4
"""How long a turn "thinks" before it answers: long enough to pause or step between
turns in the console, short enough that a demo run is about its training."""
_ATTEMPT = re.compile(r"\[attempt (\w+?)(\d+)\]")


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
    """(title, command) of each of the recipe's steps, variables filled in."""
    values: dict[str, str] = field(default_factory=dict)
    artifact: str = "submission"

    def say(self, key: str, **values: object) -> str:
        text = str(self.words.get(key, ""))
        for name, value in {**self.values, **values}.items():
            text = text.replace("{" + name + "}", str(value))
        return text

    @property
    def commands(self) -> str:
        return " && ".join(command for _, command in self.steps)


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
    plan = Plan(words=words)
    if task is None:
        return plan
    starter = [task.root / p for p in task.files.starter]
    plan.look = [
        name for name in words.get("look", []) if any((s / name).is_file() for s in starter)
    ]
    recipe = task.baseline
    values = {**recipe.vars, **own.get("vars", {})}
    found = next(
        (f for m in messages if m.role == "user" and (f := _ATTEMPT.search(m.content))), None
    )
    if found:  # a search's attempt: one change per attempt, in the script's order
        variants = own.get("attempt_variants") or recipe.variants or [{}]
        values.update(variants[(int(found.group(2)) - 1) % len(variants)])
        values["attempt"] = found.group(1) + found.group(2)
    values.setdefault("seed", str(seed if seed is not None else 0))
    plan.values = values
    for step in recipe.steps:
        command = step.command
        for name, value in values.items():
            command = command.replace("{" + name + "}", value)
        plan.steps.append((step.title, command))
    plan.artifact = recipe.submit or task.evaluator.artifact or "submission"
    return plan


def _calls(messages: list[Message]) -> list[ToolCallRequest]:
    return [c for m in messages if m.role == "assistant" for c in m.tool_calls]


def _last_result(messages: list[Message]) -> Message | None:
    return next((m for m in reversed(messages) if m.role == "tool"), None)


def _last_line(message: Message | None) -> str:
    if message is None:
        return "(nothing)"
    # A progress bar's redraws and the tool's own `[exit code 0, 117 s]` say nothing.
    pieces = [p.strip() for line in message.content.splitlines() for p in line.split("\r")]
    lines = [p for p in pieces if p and not p.startswith("[") and "%|" not in p]
    return " ".join((lines[-1] if lines else "(no output)").split())[:200]


def _report_in(message: Message | None) -> str:
    """The worker's report, out of assign_subtask's result."""
    text = message.content if message is not None else ""
    _, found, report = text.partition("Worker's report:")
    return " ".join(report.split("\nUpdate the plan")[0].split())[:300] if found else "(none)"


def _heard(messages: list[Message]) -> str:
    """ "noted: ..." for each message from the user in the newest prompt."""
    last = messages[-1] if messages and messages[-1].role == "user" else None
    if last is None:
        return ""
    said = re.findall(r"\[message from the user\] (.*)", last.content)
    return "".join(f"Noted: {text.strip().rstrip('.')}. " for text in said)


def call(name: str, n: int, **arguments: Any) -> ToolCallRequest:
    return ToolCallRequest(id=f"demo_{name}_{n}", name=name, arguments=arguments)


def supervisor_turn(messages: list[Message], plan: Plan) -> tuple[str, list[ToolCallRequest]]:
    """Plan, hand step 1 to the worker, mark the plan done, submit."""
    done = [c.name for c in _calls(messages)]
    n = len(done)
    titles = plan.words["plan"]

    def steps(finished: int) -> list[dict[str, str]]:
        return [
            {"id": str(i + 1), "title": t, "status": "done" if i < finished else "pending"}
            for i, t in enumerate(titles)
        ]

    if "update_plan" not in done:
        return plan.say("think_plan"), [call("update_plan", n, steps=steps(0))]
    if "assign_subtask" not in done:
        text = plan.say("instructions", commands=plan.commands or "nothing", artifact=plan.artifact)
        return plan.say("think_assign"), [call("assign_subtask", n, step_id="1", instructions=text)]
    if done.count("update_plan") < 2:
        report = _report_in(_last_result(messages))
        return plan.say("think_done", summary=report), [call("update_plan", n, steps=steps(2))]
    if "submit" not in done:
        text = plan.say("think_submit", artifact=plan.artifact)
        return text, [call("submit", n, path=plan.artifact, note="the demo's recipe run")]
    return "Submitted; nothing left to do.", []


def worker_turn(
    messages: list[Message], plan: Plan, *, alone: bool, attempt: bool
) -> tuple[str, list[ToolCallRequest]]:
    """List, read, run the recipe's steps, check the artifact, report (or submit)."""
    n = len(_calls(messages))
    last = _last_result(messages)
    if n == 0:
        return plan.say("think_list"), [call("list_files", n, path=".")]
    if n <= len(plan.look):
        path = plan.look[n - 1]
        return plan.say("think_read", path=path), [call("read_file", n, path=path)]
    ran = n - 1 - len(plan.look)  # the recipe's steps already run
    if 0 < ran <= len(plan.steps) and last is not None and last.is_error:
        text = plan.say("think_failed", last=_last_line(last))
        return text, [_finish(n, plan, text, alone=alone)]
    if ran < len(plan.steps):
        title, command = plan.steps[ran]
        key = "think_run_attempt" if attempt and "think_run_attempt" in plan.words else "think_run"
        return plan.say(key, title=title), [call("bash", n, command=command)]
    if ran == len(plan.steps) and plan.steps:
        text = plan.say("think_check", last=_last_line(last), artifact=plan.artifact)
        return text, [call("bash", n, command=f"ls -l {plan.artifact}")]
    if not plan.steps:
        return plan.say("no_recipe"), [_finish(n, plan, plan.say("no_recipe"), alone=alone)]
    trained = next((m for m in reversed(messages) if m.role == "tool"), None)
    tool_results = [m for m in messages if m.role == "tool"]
    if len(tool_results) >= 2:
        trained = tool_results[-2]  # the recipe's last step, before the check
    summary = plan.say("report", commands=plan.commands, last=_last_line(trained))
    text = plan.say("think_report", artifact=plan.artifact)
    return text, [_finish(n, plan, summary, alone=alone)]


def _finish(n: int, plan: Plan, summary: str, *, alone: bool) -> ToolCallRequest:
    if alone:
        return call("submit", n, path=plan.artifact, note=summary[:300])
    return call("report", n, summary=summary)


class DemoProvider(ModelProvider):
    priced = True  # it is free: a cost budget holds, at 0
    context_window_from = "default"

    def __init__(self, seed: int | None) -> None:
        self.name = "demo"
        self.seed = seed

    async def generate(
        self,
        *,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        on_text: TextCallback | None = None,
        max_tokens: int | None = None,
    ) -> ModelResponse:
        head = system.lstrip().splitlines()[0].lower() if system.strip() else ""
        plan = plan_for(messages, self.seed)
        offered = {t.name for t in tools}
        calls: list[ToolCallRequest] = []
        if head.startswith("you summarize"):
            text = plan.say("summary")
        elif "reviewing" in head:
            text = plan.say("review")
        elif "supervisor" in head and "assign_subtask" in offered:
            text, calls = supervisor_turn(messages, plan)
        elif "worker" in head:
            attempt = any(_ATTEMPT.search(m.content) for m in messages if m.role == "user")
            text, calls = worker_turn(messages, plan, alone="alone" in head, attempt=attempt)
        else:
            text = "The demo model plays a supervisor and a worker only (not --search llm)."
        text = _heard(messages) + text
        await asyncio.sleep(THINK_S)
        if on_text is not None:
            for piece in re.findall(r"\S+\s*", text):
                on_text(piece)
        sent = len(system) + sum(len(m.content) for m in messages)
        produced = len(text) + sum(len(str(c.arguments)) for c in calls)
        return ModelResponse(
            text=text,
            tool_calls=calls,
            usage=estimated_usage(sent, produced),
            stop_reason="tool_use" if calls else "end_turn",
            latency_s=THINK_S,
        )


def demo(request: ProviderRequest) -> ModelProvider:
    """`--model demo`: needs no key, no server; `--base-url` has nothing to reach."""
    return DemoProvider(request.settings.seed)
