"""The console's dialogs: confirmations, messages, editing a call, breakpoints, diffs, help.

A dialog's words may quote the run (a tool's name, a job's, a path): each is shown as
`Text`, which Textual never reads as markup, with its control characters escaped
(mlra/terminal_text.py). A job named `[@click=app.quit]x[/]` is a job with an odd name,
not a link that quits."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rich.console import RenderableType
from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Input, Label, OptionList, Static, TextArea
from textual.widgets.option_list import Option

from mlra.console.text.keymap import KEYS, Key, display_key
from mlra.terminal_text import printable, printable_json, printable_line


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question before something that cannot be undone (stop, quit, fork, submit).

    No has the focus, so Enter answers No: a stray Enter (typed after a key that opened
    this instead of a prompt) must not stop a run."""

    AUTO_FOCUS = "#no"
    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str, detail: str = "") -> None:
        super().__init__()
        self.question = question
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(printable(self.question)), classes="dialog-title")
            if self.detail:
                yield Static(Text(printable(self.detail)), classes="dialog-detail")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no", variant="primary")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


class PromptScreen(ModalScreen[str | None]):
    """One line of text from the user (a message to an agent, a reason to reject)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, placeholder: str = "", *, allow_empty: bool = False) -> None:
        super().__init__()
        self.title_text = title
        self.placeholder = placeholder
        self.allow_empty = allow_empty

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(printable(self.title_text)), classes="dialog-title")
            yield Input(placeholder=self.placeholder, id="prompt-input")
            yield Static("Enter to send · Escape to cancel", classes="dialog-detail")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if text or self.allow_empty:
            self.dismiss(text)

    def action_cancel(self) -> None:
        self.dismiss(None)


class EditableText(TextArea):
    """A dialog's text to edit, where Ctrl+A selects all of it (as most editors do; the
    plain TextArea's Ctrl+A goes to the line's start, which Home still does), so the
    text can be replaced whole."""

    BINDINGS = [Binding("ctrl+a", "select_all", "Select all", show=False)]


SELECT_ALL = Binding("ctrl+a", "select_all", "Select all", show=False)
"""A dialog's own Ctrl+A, for when its text does not have the focus (yet: a Ctrl+A that
came as the dialog opened, before its text took the focus, was lost, and what was typed
next went in before the old text, as invalid JSON, the hint notwithstanding)."""


def select_all_text(screen: Screen[Any]) -> None:
    """Give the dialog's text the focus, and select all of it, so typing replaces it."""
    text = screen.query_one(EditableText)
    text.focus()
    text.select_all()


class EditArgsScreen(ModalScreen[dict[str, Any] | None]):
    """The waiting call's arguments as JSON, to change before it runs."""

    BINDINGS = [
        Binding("ctrl+s", "save", "Run with these arguments"),
        Binding("escape", "cancel", "Cancel"),
        SELECT_ALL,
    ]

    def action_select_all(self) -> None:
        select_all_text(self)

    def __init__(
        self,
        tool: str,
        arguments: dict[str, Any] | None,
        problem: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> None:
        super().__init__()
        self.tool = tool
        self.arguments = arguments or {}
        self.problem = problem
        """What the tool would say is wrong with the edited arguments: said here, and the
        dialog stays, rather than the edit running into the tool's error."""

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog-wide"):
            yield Label(
                Text(f"Edit the arguments of {printable_line(self.tool)}"), classes="dialog-title"
            )
            # Above the text, not below: a short terminal cuts the dialog's bottom off,
            # and how to save and cancel (or why saving failed) must stay in sight.
            yield Static(
                "Ctrl+S to run it with these arguments · Ctrl+A selects all · Escape to cancel",
                id="edit-error",
                classes="dialog-hint",
            )
            # C1 and bidirectional controls as JSON escapes: the same arguments once
            # read back, and shown as what they are.
            yield EditableText(
                printable_json(json.dumps(self.arguments, indent=2, ensure_ascii=False)),
                language=None,
                id="edit-args",
                soft_wrap=True,
            )

    def action_save(self) -> None:
        text = self.query_one("#edit-args", TextArea).text
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            self.query_one("#edit-error", Static).update(
                f"Not valid JSON: {exc.msg} (line {exc.lineno})"
            )
            return
        if not isinstance(value, dict):
            self.query_one("#edit-error", Static).update("The arguments must be a JSON object.")
            return
        if self.problem is not None and (problem := self.problem(value)) is not None:
            self.query_one("#edit-error", Static).update(Text(printable_line(problem)))
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class BreakpointsScreen(ModalScreen[list[str] | None]):
    BINDINGS = [
        Binding("ctrl+s", "save", "Save"),
        Binding("escape", "cancel", "Cancel"),
        SELECT_ALL,
    ]

    def action_select_all(self) -> None:
        select_all_text(self)

    def __init__(
        self, rules: list[str], problem: Callable[[str], str | None] | None = None
    ) -> None:
        super().__init__()
        self.rules = rules
        self.problem = problem
        """Why a rule would never fire (it names no tool of the run's agents): said here,
        and the dialog stays, rather than a breakpoint that waits for nothing."""

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog-wide"):
            yield Label("Break before tool calls", classes="dialog-title")
            yield Static(
                "One rule a line:  *  (every call) · bash  (a tool) · bash:rm -rf  (a tool whose "
                "arguments contain the text) · :pip install  (any tool). Empty: no breakpoints.",
                classes="dialog-detail",
            )
            # The rules set, then an empty line for the next: the cursor waits there.
            yield EditableText("".join(f"{rule}\n" for rule in self.rules), id="break-rules")
            yield Static(
                "Ctrl+S to save · Ctrl+A selects all · Escape to cancel",
                id="break-error",
                classes="dialog-detail",
            )

    def on_mount(self) -> None:
        """A rule typed at once is added: with the cursor at the start, `submit` typed
        over a set `bash` made one rule, `submitbash`."""
        rules = self.query_one("#break-rules", TextArea)
        rules.move_cursor(rules.document.end)

    def action_save(self) -> None:
        text = self.query_one("#break-rules", TextArea).text
        rules = [line.strip() for line in text.splitlines() if line.strip()]
        for rule in rules:
            if self.problem is not None and (problem := self.problem(rule)) is not None:
                self.query_one("#break-error", Static).update(
                    Text(printable_line(f"{rule}: {problem}"))
                )
                return
        self.dismiss(rules)

    def action_cancel(self) -> None:
        self.dismiss(None)


class StopJobScreen(ModalScreen[str | None]):
    """Pick a running background job to stop: its id, or None on Escape."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, jobs: list[tuple[str, str]]) -> None:
        super().__init__()
        self.jobs = jobs
        """(id, label) of each running job."""

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Stop a background job", classes="dialog-title")
            # A job's name is the agent's: a Text, never markup (no `[@click=...]` link).
            options = (Option(Text(printable_line(label)), id=job) for job, label in self.jobs)
            yield OptionList(*options, id="jobs")
            yield Static(
                "Enter stops the chosen job (the agent sees it stopped by the user) · "
                "Escape to cancel",
                classes="dialog-detail",
            )

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


class DiffScreen(ModalScreen[None]):
    """A unified diff: a file's last change up to the replay's cursor, or two attempts'
    workspaces (with `header`, their scores side by side, above it)."""

    BINDINGS = [Binding("escape,q,d", "close", "Close")]
    DEFAULT_CSS = """
    #diff-scroll {
        height: auto;
        max-height: 32;
    }
    #diff-header {
        margin-bottom: 1;
    }
    """

    def __init__(
        self, title: str, diff: str, header: RenderableType | None = None, *, key: str = "d"
    ) -> None:
        """`key`: the one that opened it, which closes it too and is the one named (the
        compare screen's `p` diff said "Escape or d to close")."""
        super().__init__()
        self.title_text = title
        self.diff = diff
        self.header = header
        self.key = key
        self._bindings.bind(key, "close", "Close", show=False)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog-wide", id="diff-dialog"):
            yield Label(Text(printable_line(self.title_text)), classes="dialog-title")
            with VerticalScroll(id="diff-scroll"):
                if self.header is not None:
                    yield Static(self.header, id="diff-header")
                body: Any = (
                    Syntax(printable(self.diff), "diff", theme="ansi_dark", word_wrap=False)
                    if self.diff
                    else Text("no textual difference", style="dim")
                )
                yield Static(body, id="diff-text")
            yield Static(f"Escape or {self.key} to close", classes="dialog-detail")

    def action_close(self) -> None:
        self.dismiss(None)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "close", "Close")]

    def __init__(self, keys: list[Key] | None = None, *, replay: bool = False) -> None:
        super().__init__()
        self.keys = keys or KEYS
        self.replay = replay

    def compose(self) -> ComposeResult:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        keys = Table.grid(padding=(0, 2))
        keys.add_column(style="bold", no_wrap=True)
        keys.add_column(no_wrap=True)
        keys.add_column(ratio=1)
        for k in self.keys:
            keys.add_row(display_key(k.key), k.label, k.help)
        keys.add_row("Ctrl+P", "Palette", "Every action above, by name.")
        keys.add_row(
            "Tab",
            "Focus",
            "Move between panes; in the transcript, Enter or x expands a call's output.",
        )
        intro = Text(
            "A recorded run, read-only: every pane shows the run as it was at the event under "
            "the cursor, rebuilt from its event log and workspace snapshots. Notes on steps "
            "(#, c, r) go beside the log, in annotations.jsonl.\n"
            if self.replay
            else "The agent runs inside this app. Everything you see comes from the run's event "
            "log (events.jsonl in the run folder), and everything you do is recorded there too; "
            "notes on steps (#, c, +, -) go beside it, in annotations.jsonl.\n"
        )
        with VerticalScroll(classes="dialog dialog-wide", id="help-dialog"):
            yield Label("mlra replay" if self.replay else "mlra console", classes="dialog-title")
            yield Static("Escape, ? or q closes this help", classes="dialog-detail")
            yield Static(Group(intro, keys), id="help-text")

    def action_close(self) -> None:
        self.dismiss(None)
