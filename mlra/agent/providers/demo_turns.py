"""The turns of `--model demo` (agent/providers/demo.py): the supervisor's and the
worker's next move, read off the history alone.

Each reads the result of its last call as a careful agent would: a call the user
rejected runs again with the change the rejection states (`--steps 40`, `40 steps`), or
as it was; a call the user edited and that failed runs again as the recipe has it; a
call a stopped run left unfinished runs again as it ran; a failure of its own is
reported, not guessed around. The worker reports the calls that ran, edits included, and
the supervisor submits only an artifact it has seen in the workspace."""

from __future__ import annotations

from typing import Any

from mlra.agent.providers.base import Message, ToolCallRequest
from mlra.agent.providers.demo_plan import RELAYED, Plan
from mlra.agent.providers.result_notes import (
    EDITED_NOTE,
    INTERRUPTED_OUTPUT,
    REJECTED,
    RUN_ENDED_UNDER,
)

MAX_TRIES = 3
"""Runs of one recipe step the worker makes before it reports it failed."""
MAX_SUBTASKS = 2
"""Subtasks the supervisor assigns (the first, and one more where the artifact is
missing) before it says there is nothing to submit."""
_EDITED = EDITED_NOTE.split(":", 1)[0]


def call(name: str, n: int, **arguments: Any) -> ToolCallRequest:
    return ToolCallRequest(id=f"demo_{name}_{n}", name=name, arguments=arguments)


def _calls(messages: list[Message]) -> list[ToolCallRequest]:
    return [c for m in messages if m.role == "assistant" for c in m.tool_calls]


def _results(messages: list[Message]) -> dict[str, Message]:
    return {m.tool_call_id: m for m in messages if m.role == "tool" and m.tool_call_id}


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


def _rejected(message: Message | None) -> str | None:
    """The user's message where `message` is the result of a call they rejected."""
    if message is None or not message.content.startswith(REJECTED):
        return None
    return message.content[len(REJECTED) :].strip()


def supervisor_turn(messages: list[Message], plan: Plan) -> tuple[str, list[ToolCallRequest]]:
    """Plan, hand step 1 to the worker, see the artifact is there (else hand it again),
    mark the plan done, submit."""
    calls = _calls(messages)
    n = len(calls)
    last = calls[-1] if calls else None
    got = _results(messages).get(last.id) if last else None
    assigned = sum(c.name == "assign_subtask" for c in calls)
    titles = plan.words["plan"]

    def steps(finished: int) -> list[dict[str, str]]:
        return [
            {"id": str(i + 1), "title": t, "status": "done" if i < finished else "pending"}
            for i, t in enumerate(titles)
        ]

    def assign(key: str, **values: object) -> ToolCallRequest:
        """The subtask, with what the user told the supervisor passed on to the worker."""
        text = plan.say(key, commands=plan.commands or "nothing", artifact=plan.artifact, **values)
        relayed = "".join(f"\n{RELAYED}{said}" for said in plan.said)
        return call("assign_subtask", n, step_id="1", instructions=text + relayed)

    if last is None:
        return plan.say("think_plan"), [call("update_plan", n, steps=steps(0))]
    if not assigned:
        return plan.say("think_assign"), [assign("instructions")]
    if last.name == "assign_subtask":
        said = _rejected(got)
        if said is not None and assigned <= MAX_SUBTASKS:
            return plan.say("think_assign_again", said=said), [assign("instructions")]
        text = plan.say("think_done", summary=_report_in(got), artifact=plan.artifact)
        return text, [call("list_files", n, path=plan.artifact)]
    if last.name == "list_files" and got is not None and got.is_error:
        handed = [c for c in calls if c.name == "assign_subtask"][-1]
        summary = _report_in(_results(messages).get(handed.id))
        if assigned < MAX_SUBTASKS:
            text = plan.say("think_missing", artifact=plan.artifact, last=_last_line(got))
            return text, [assign("instructions_again", summary=summary)]
        return plan.say("think_give_up", artifact=plan.artifact, tries=assigned), []
    if last.name == "list_files":
        text = plan.say("think_found", artifact=plan.artifact)
        return text, [call("update_plan", n, steps=steps(2))]
    if last.name == "update_plan":
        text = plan.say("think_submit", artifact=plan.artifact)
        return text, [call("submit", n, path=plan.artifact, note="the demo's recipe run")]
    if last.name == "submit" and got is not None and got.is_error:
        return plan.say("think_submit_failed", last=_last_line(got)), []
    # Anything else (a fork from a turn of its own choosing): look for the artifact.
    return plan.say("think_look", artifact=plan.artifact), [
        call("list_files", n, path=plan.artifact)
    ]


def _subtask(messages: list[Message]) -> list[Message]:
    """The messages of the subtask in hand: a worker's history runs on across subtasks."""
    starts = [
        i for i, m in enumerate(messages) if m.role == "user" and m.content.startswith("[subtask ")
    ]
    return messages[starts[-1] :] if starts else messages


def worker_turn(
    messages: list[Message], plan: Plan, *, alone: bool, attempt: bool
) -> tuple[str, list[ToolCallRequest]]:
    """List, read, run the recipe's steps (again where the user's controls call for it),
    check the artifact, report what ran (or submit)."""
    n = len(_calls(messages))  # ids stay unique across subtasks
    mine = _subtask(messages)
    calls = _calls(mine)
    results = _results(mine)
    if not calls:
        return plan.say("think_list"), [call("list_files", n, path=".")]
    if len(calls) <= len(plan.look):
        path = plan.look[len(calls) - 1]
        return plan.say("think_read", path=path), [call("read_file", n, path=path)]
    if not plan.steps:
        text = plan.say("no_recipe")
        return text, _finish(n, plan, text, alone=alone, failed=True)
    # Where the recipe stands: a step is done when a run of it succeeded; the bash call
    # made once all are done is the artifact's check.
    step, tries, check = 0, 0, None
    ran: list[tuple[ToolCallRequest, Message]] = []
    last_run: tuple[ToolCallRequest, Message] | None = None
    for c in calls[1 + len(plan.look) :]:
        result = results.get(c.id)
        if c.name != "bash" or result is None:
            continue
        if step >= len(plan.steps):
            check = result
        elif result.is_error:
            tries += 1
            last_run = (c, result)
        else:
            ran.append((c, result))
            step, tries = step + 1, 0
    if step < len(plan.steps):
        title, command = plan.steps[step]
        if last_run is None or tries == 0:
            key = (
                "think_run_attempt"
                if attempt and "think_run_attempt" in plan.words
                else "think_run"
            )
            return plan.say(key, title=title), [call("bash", n, command=command)]
        failed, result = last_run
        text, again = _again(plan, failed, result, command)
        if again is None or tries >= MAX_TRIES:
            text = plan.say("think_failed", last=_last_line(result), tries=tries)
            return text, _finish(n, plan, text, alone=alone, failed=True)
        return text, [call("bash", n, command=again)]
    if check is None:
        text = plan.say(
            "think_check", last=_last_line(ran[-1][1] if ran else None), artifact=plan.artifact
        )
        return text, [call("bash", n, command=f"ls -l {plan.artifact}")]
    if check.is_error:
        text = plan.say("think_no_artifact", artifact=plan.artifact, last=_last_line(check))
        return text, _finish(n, plan, text, alone=alone, failed=True)
    edited = any(result.content.startswith(_EDITED) for _, result in ran)
    summary = plan.say(
        "report",
        commands=" && ".join(str((c.arguments or {}).get("command", "")) for c, _ in ran),
        edited=plan.say("edited") if edited else "",
        last=_last_line(ran[-1][1] if ran else None),
    )
    text = plan.say("think_report", artifact=plan.artifact)
    return text, _finish(n, plan, summary, alone=alone)


def _again(
    plan: Plan, failed: ToolCallRequest, result: Message, command: str
) -> tuple[str, str | None]:
    """What the worker says and runs after a run of a step failed: None where it should
    report the failure instead (a failure of its own call, that would only repeat)."""
    said = _rejected(result)
    if said is not None:
        changes = plan.changes(said)
        if changes:
            return plan.say("think_rejected_change", said=said, changes=changes), command
        return plan.say("think_rejected", said=said), command
    # Cut short by a crash (the resumed run's note, its opening words: a shortened
    # history keeps only part of it) or by the run's end (a stop, its time limit).
    if INTERRUPTED_OUTPUT[:28] in result.content or RUN_ENDED_UNDER in result.content:
        as_ran = str((failed.arguments or {}).get("command") or command)
        return plan.say("think_interrupted"), as_ran
    if result.content.startswith(_EDITED):
        return plan.say("think_edit_failed", last=_last_line(result)), command
    return "", None


def _finish(
    n: int, plan: Plan, summary: str, *, alone: bool, failed: bool = False
) -> list[ToolCallRequest]:
    """The worker's last call: its report; alone, `submit`, where there is something to
    submit (else no call: it says so, and the run ends with nothing submitted)."""
    if alone and failed:
        return []
    if alone:
        return [call("submit", n, path=plan.artifact, note=summary[:300])]
    return [call("report", n, summary=summary)]
