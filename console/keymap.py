"""The console's keys: one table that the footer, the help screen and the command
palette all read, so they cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding


@dataclass(frozen=True)
class Key:
    key: str
    action: str
    label: str
    help: str
    footer: bool = True


KEYS: list[Key] = [
    Key(
        "space",
        "pause",
        "Pause",
        "Pause the agent: running commands are suspended, the clock stops.",
    ),
    Key("space", "resume", "Resume", "Resume a paused agent (also after a model provider failed)."),
    Key("n", "step", "Step", "Run exactly one agent action, then pause again."),
    Key("a", "approve", "Approve", "Approve the tool call waiting at a breakpoint."),
    Key("e", "edit", "Edit", "Edit the waiting tool call's arguments, then run it."),
    Key("r", "reject", "Reject", "Reject the waiting tool call with a message the worker reads."),
    Key(
        "b",
        "breakpoints",
        "Breaks",
        "Set breakpoints: break before all tool calls, a tool, or a pattern in the arguments.",
    ),
    Key(
        "i",
        "inject('worker')",
        "Msg worker",
        "Send a message to the worker; it reads it before its next step.",
    ),
    Key(
        "I",
        "inject('supervisor')",
        "Msg supervisor",
        "Send a message to the supervisor.",
        footer=False,
    ),
    Key("s", "stop", "Stop & eval", "Stop the agent now and evaluate what the workspace holds."),
    Key(
        "F",
        "toggle_files",
        "Files",
        "Show or hide the workspace's files (in narrow terminals they replace the transcript).",
        footer=False,
    ),
    Key(
        "f",
        "follow",
        "Follow",
        "Follow the newest transcript entry again after scrolling up.",
        footer=False,
    ),
    Key(
        "x", "expand", "Expand", "Expand or collapse the focused tool call's output.", footer=False
    ),
    Key("question_mark", "help", "Help", "Show this help."),
    Key("q", "quit", "Quit", "Quit; a running run is stopped (not evaluated) and its log kept."),
]


def bindings() -> list[Binding]:
    out = [Binding(k.key, k.action, k.label, show=k.footer) for k in KEYS]
    out.append(Binding("ctrl+c", "quit", "Quit", show=False, priority=True))
    return out


def display_key(key: str) -> str:
    return {"space": "Space", "question_mark": "?"}.get(key, key)
