"""The console's keys: one table that the footer, the help screen and the command
palette all read, so they cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding, BindingType


@dataclass(frozen=True)
class Key:
    key: str
    action: str
    label: str
    help: str
    footer: bool = True
    gives_way: int = 0
    """On a footer too narrow for every key, the higher this, the sooner the key is left
    out of it (it still works: help and the palette list it); see console/panes/footer.py."""


FILES_KEY = Key(
    "F",
    "toggle_files",
    "Files",
    "Go to the workspace's files, and back (narrow terminals show them in place of the "
    "transcript).",
    footer=False,
)
VIEW_KEYS: list[Key] = [
    Key(
        "x", "expand", "Expand", "Expand or collapse the focused tool call's output.", footer=False
    ),
    Key(
        "v",
        "curves",
        "Curves",
        "Show the curves of the numbers jobs print or write (loss, accuracy...) with the "
        "validation scores; pick series to overlay, l log scale, t step or time; Esc closes.",
        footer=False,
    ),
    Key("question_mark", "help", "Help", "Show this help."),
]
"""Keys that mean the same in the live console and the replay: defined once."""

NOTE_KEYS: list[Key] = [
    Key(
        "number_sign",
        "tag",
        "Tag",
        "Tag the worker step shown (the selected call's, else the newest; in a replay, the "
        "cursor's): kept with who and when in annotations.jsonl, beside the log.",
        footer=False,
    ),
    Key("c", "comment", "Comment", "Comment on the step shown (kept as a tag is).", footer=False),
]
"""Annotating a step (agent/record/annotations.py): the same keys live and in a replay."""

KEYS: list[Key] = [
    Key(
        "space",
        "pause",
        "Pause",
        "Pause the agent: running commands are suspended, the clock stops.",
    ),
    Key("space", "resume", "Resume", "Resume a paused agent (also after a model provider failed)."),
    Key(
        "n",
        "step",
        "Step",
        "Run exactly one agent action, then pause again (running: pause once the action "
        "in hand is done).",
        gives_way=1,
    ),
    Key("a", "approve", "Approve", "Approve the tool call waiting at a breakpoint."),
    Key("e", "edit", "Edit", "Edit the waiting tool call's arguments, then run it."),
    Key("r", "reject", "Reject", "Reject the waiting tool call with a message the worker reads."),
    Key(
        "b",
        "breakpoints",
        "Breaks",
        "Set breakpoints: break before all tool calls, a tool, or a pattern in the arguments.",
        gives_way=2,
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
    Key(
        "j",
        "stop_job",
        "Stop job",
        "Stop a running background job (choose it in a list); the agent sees it stopped "
        "by the user.",
        footer=False,
    ),
    Key("s", "stop", "Stop & eval", "Stop the agent now and evaluate what the workspace holds."),
    *NOTE_KEYS,
    Key("plus", "rate(1)", "Rate +1", "Rate the step shown +1 (a good step).", footer=False),
    Key("minus", "rate(-1)", "Rate -1", "Rate the step shown -1 (a bad step).", footer=False),
    FILES_KEY,
    Key(
        "f",
        "follow",
        "Follow",
        "Follow the newest transcript entry again after scrolling up.",
        footer=False,
    ),
    *VIEW_KEYS,
    Key("q", "quit", "Quit", "Quit; a running run is stopped (not evaluated) and its log kept."),
]


REPLAY_KEYS: list[Key] = [
    Key("right", "forward", "Event", "Step forward one event."),
    Key("left", "step_back", "Back", "Step back one event.", footer=False),
    Key("right_square_bracket", "next_step", "Step", "Go to the next agent step."),
    Key("left_square_bracket", "prev_step", "Step back", "Go back to the previous agent step."),
    Key("n", "next_step", "Next step", "Go to the next agent step (as ]).", footer=False),
    Key("p", "prev_step", "Previous step", "Go back one agent step (as [).", footer=False),
    Key("g", "goto_step", "Go to", "Jump to a step by its number (in a search, its own)."),
    Key("t", "next_mark('tool')", "Tool", "Go to the next tool call."),
    Key(
        "T",
        "prev_mark('tool')",
        "Previous tool",
        "Go back to the previous tool call.",
        footer=False,
    ),
    Key(
        "e",
        "next_mark('error')",
        "Error",
        "Go to the next error (failed call, model error, error notice).",
    ),
    Key(
        "E", "prev_mark('error')", "Previous error", "Go back to the previous error.", footer=False
    ),
    Key("l", "next_mark('plan')", "Plan", "Go to the next change of the plan."),
    Key(
        "L",
        "prev_mark('plan')",
        "Previous plan",
        "Go back to the previous change of the plan.",
        footer=False,
    ),
    Key(
        "o",
        "next_mark('annotation')",
        "Note",
        "Go to the next annotation (a tag, comment or rating someone made).",
        footer=False,
    ),
    Key(
        "O",
        "prev_mark('annotation')",
        "Previous note",
        "Go back to the previous annotation.",
        footer=False,
    ),
    Key(
        "slash",
        "search",
        "Search",
        "Search the transcript (thoughts, calls' arguments, output) and the annotations.",
    ),
    Key("m", "next_match", "Next match", "Go to the next match of the search.", footer=False),
    Key(
        "M", "prev_match", "Previous match", "Go to the previous match of the search.", footer=False
    ),
    Key("space", "play", "Play", "Play the run forward at the chosen speed; Space again pauses."),
    Key("plus", "faster", "Faster", "Play faster.", footer=False),
    Key("minus", "slower", "Slower", "Play slower.", footer=False),
    Key("u", "play_unit", "Unit", "Play by events or by agent steps.", footer=False),
    Key(
        "home",
        "first",
        "Start",
        "Go to the run's first event (a finished run's replay opens at its end).",
        footer=False,
    ),
    Key("end", "last", "End", "Go to the run's last event.", footer=False),
    Key("d", "diff", "Diff", "Show the selected file's last change up to here, as a diff."),
    Key("f", "fork", "Fork", "Fork a new run from the worker step shown (mlra fork)."),
    *NOTE_KEYS,
    Key(
        "r", "rate_step", "Rate", "Rate the step shown: +1 or -1 (kept as a tag is).", footer=False
    ),
    FILES_KEY,
    *VIEW_KEYS,
    Key("q", "quit", "Quit", "Leave the replay (the run is only read, never changed)."),
]
"""The replay console's keys (read-only: nothing here steers a run)."""


ATTEMPTS_FOCUS_KEY = Key(
    "A",
    "focus_attempts",
    "Attempts",
    "Go to the Attempts pane (a run that searches); its keys then act on the selected attempt.",
    footer=False,
)
"""Bound in both consoles, listed by help only where the run has attempts."""

ATTEMPT_VIEW_KEYS: list[Key] = [
    Key(
        "enter",
        "select",
        "Open",
        "In the Attempts pane: open the selected attempt (its transcript and files).",
    ),
    Key(
        "D",
        "diff",
        "Diff",
        "In the Attempts pane: diff the selected attempt with another (files and scores).",
    ),
]
"""The Attempts pane's keys that only read (the replay has these)."""

ATTEMPT_KEYS: list[Key] = [
    *ATTEMPT_VIEW_KEYS,
    Key("x", "stop", "Stop", "In the Attempts pane: stop the selected running attempt."),
    Key(
        "p",
        "promote",
        "Promote",
        "In the Attempts pane: submit the selected attempt; the run ends and grades its "
        "validated copy.",
    ),
    Key(
        "m",
        "message",
        "Msg",
        "In the Attempts pane: send a message to the selected running attempt's worker.",
    ),
]
"""The Attempts pane's own keys (they apply while it has the focus; Tab moves there)."""


def bindings(keys: list[Key] | None = None) -> list[BindingType]:
    out: list[BindingType] = [
        Binding(k.key, k.action, k.label, show=k.footer)
        for k in [*(keys or KEYS), ATTEMPTS_FOCUS_KEY]
    ]
    out.append(Binding("ctrl+c", "quit", "Quit", show=False, priority=True))
    return out


def display_key(key: str) -> str:
    return {
        "space": "Space",
        "question_mark": "?",
        "right": "→",
        "left": "←",
        "right_square_bracket": "]",
        "left_square_bracket": "[",
        "slash": "/",
        "plus": "+",
        "minus": "-",
        "home": "Home",
        "end": "End",
        "enter": "Enter",
        "number_sign": "#",
    }.get(key, key)
