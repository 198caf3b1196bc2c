"""The console's footer at 80x24: quit and help stay in view while a call waits, the
edit dialog says how to save and cancel, and while the run is graded no steering key
is offered."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Footer, Static, TextArea
from textual.widgets._footer import FooterKey

from mlra import events as ev
from mlra.console.apps.app import MlraApp
from mlra.console.screens.screens import EditArgsScreen, HelpScreen, PromptScreen
from tests.console.test_console_controls import ANSWER, REPORT, is_, live, worker


def footer_keys(app: MlraApp) -> list[str]:
    """The footer's keys a person can see: shown, and within the screen's width."""
    width = app.size.width
    shown = []
    for key in app.screen.query_one(Footer).query(FooterKey):
        region = key.region
        if key.display and region.width and region.right <= width:
            shown.append(key.key_display or key.key)
    return shown


async def test_footer_keeps_quit_and_help_at_80x24_while_a_call_waits(
    tmp_path: Path, answer_task: Path
) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        await run.pilot.resize_terminal(80, 24)
        await run.watch.wait(is_(ev.ApprovalRequested))
        await run.shown(lambda app: app.state.phase == "awaiting_approval")
        await run.shown(lambda app: "a" in footer_keys(app))  # the footer's redraw
        keys = footer_keys(run.app)
        assert "q" in keys and "?" in keys and "a" in keys
        await run.pilot.press("a")
        await run.finished()


async def test_the_edit_dialog_says_how_to_save_and_cancel_at_80x24(
    tmp_path: Path, answer_task: Path
) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        await run.pilot.resize_terminal(80, 24)
        await run.watch.wait(is_(ev.ApprovalRequested))
        await run.shown(lambda app: app.state.pending_approval is not None)
        await run.pilot.press("e")
        await run.shown(lambda app: isinstance(app.screen, EditArgsScreen))
        await run.pilot.pause()
        screen = run.app.screen
        hint = screen.query_one("#edit-error", Static)
        dialog = screen.query_one(".dialog")
        text = screen.query_one("#edit-args", TextArea)
        assert "Ctrl+S" in str(hint.render()) and "Escape" in str(hint.render())
        for widget in (hint, text):
            # Wholly inside the dialog's visible area, and so on the screen.
            assert dialog.content_region.contains_region(widget.region), widget
        assert dialog.region.bottom <= 24
        # Ctrl+A selects the whole text (the dialog says so), to replace it at once.
        assert "Ctrl+A selects all" in str(hint.render())
        text.focus()
        await run.pilot.press("ctrl+a")
        await run.shown(lambda app: text.selected_text == text.text)
        await run.pilot.press("escape")
        await run.shown(lambda app: not isinstance(app.screen, EditArgsScreen))
        await run.pilot.press("a")
        await run.finished()


async def test_while_evaluating_the_footer_offers_no_steering(
    tmp_path: Path, answer_task: Path
) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        await run.watch.wait(is_(ev.ApprovalRequested))
        await run.shown(lambda app: "a" in footer_keys(app))
        assert {"space", "n", "i", "s"} <= set(footer_keys(run.app))
        # The run as the console sees it during an evaluation (held at the breakpoint,
        # so the phase stays put), as tests/console/test_console_status.py does.
        run.controller.emit(ev.EvaluationStarted(evaluator="answer", artifact="answer.txt"))
        await run.shown(lambda app: app.state.phase == "evaluating")
        await run.pilot.pause()
        keys = set(footer_keys(run.app))
        assert not keys & {"space", "n", "b", "i", "s"} and {"?", "q"} <= keys
        await run.pilot.press("i")
        await run.pilot.pause()
        assert not isinstance(run.app.screen, PromptScreen)  # no message to a stopped agent
        run.controller.request_stop(evaluate=False)
        await run.finished()


async def test_closing_the_help_keeps_the_footer_and_a_new_phase_redraws_it(
    tmp_path: Path, answer_task: Path
) -> None:
    """Closing a dialog refreshes the screen's keys; the footer is rebuilt only when what
    it shows changes (a rebuild lays the whole screen out, slow under an output flood),
    and still is when the run's phase changes its keys."""
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        await run.watch.wait(is_(ev.ApprovalRequested))
        await run.shown(lambda app: "a" in footer_keys(app))
        before = list(run.app.screen.query_one(Footer).query(FooterKey))
        await run.pilot.press("question_mark")
        await run.shown(lambda app: isinstance(app.screen, HelpScreen))
        await run.pilot.press("question_mark")
        await run.shown(lambda app: not isinstance(app.screen, HelpScreen))
        await run.pilot.pause()
        assert list(run.app.screen.query_one(Footer).query(FooterKey)) == before
        await run.pilot.press("a")
        await run.shown(lambda app: "a" not in footer_keys(app))
        await run.finished()


async def test_the_help_says_how_to_close_it_and_q_there_closes_it_not_the_console() -> None:
    """A newcomer's `?` opened a screen of keys that said nothing of leaving it; q, the
    one they know, closes the help, and the console stays."""
    from tests.console.console_fixtures import recorded_run

    app = MlraApp(events=recorded_run("running"))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        hints = [str(s.render()) for s in app.screen.query(".dialog-detail").results(Static)]
        assert "Escape, ? or q closes this help" in hints
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen) and app.is_running
