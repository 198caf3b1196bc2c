"""The edit dialog (`e` at an approval): Ctrl+A selects the arguments whole, as its hint
says, and what is typed then replaces them, also where the Ctrl+A came before the text
had the focus (as the dialog opened)."""

from __future__ import annotations

import json
from pathlib import Path

from textual.widgets import TextArea

from mlra import events as ev
from mlra.console.screens.screens import EditArgsScreen
from tests.console.test_console_controls import ANSWER, REPORT, is_, live, worker


async def test_ctrl_a_then_typing_replaces_the_arguments(tmp_path: Path, answer_task: Path) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        waiting = await run.watch.wait(is_(ev.ApprovalRequested))
        assert isinstance(waiting, ev.ApprovalRequested)
        await run.shown(lambda app: app.state.pending_approval is not None)
        await run.pilot.press("e")
        await run.shown(lambda app: isinstance(app.screen, EditArgsScreen))
        area = run.app.screen.query_one(TextArea)
        # The text has not taken the focus yet. Before, this Ctrl+A was lost, and the
        # typing went in before the old text: `Not valid JSON: Extra data`.
        run.app.screen.set_focus(None)
        await run.pilot.press("ctrl+a")
        typed = json.dumps({"command": "echo 41 > answer.txt"})
        await run.pilot.press(*typed)
        await run.shown(lambda app: area.text == typed)
        await run.pilot.press("ctrl+s")
        result = await run.watch.wait(is_(ev.ToolResult, call_id=waiting.call_id))
        await run.finished()
    assert isinstance(result, ev.ToolResult) and result.ok
    assert (run.controller.workspace / "answer.txt").read_text().strip() == "41"
