"""`--model demo` in the console, as a newcomer tries it: a breakpoint on `bash` holds
the worker's training call, `e` edits it, and the edited command is what runs and what
the worker's next thought reads and its report names. The run's model is the demo provider itself (no server)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

from textual.widgets import TextArea

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.apps.app import MlraApp
from mlra.console.screens.screens import EditArgsScreen
from mlra.tasks.spec import find_task
from tests.console.test_console_controls import Live, Watch, is_

EDITED = "mkdir -p submission && echo edited-ran"


async def test_edit_the_demo_workers_training_call_and_it_reads_the_edited_result(
    tmp_path: Path,
) -> None:
    provider = resolve_model("demo", base_url=None, env={})
    cfg = RunConfig(
        task="tiny-lm",
        model="demo",
        runs_dir=tmp_path,
        isolation="none",
        breakpoints=["bash"],
        ungraded="a console test",
    )
    controller = RunController(cfg, find_task("tiny-lm"), provider)
    controller.prepare()
    watch = Watch(controller)
    app = MlraApp(controller=controller, make_agent=agent_for)
    async with app.run_test(size=(160, 48)) as pilot:
        run = Live(app, pilot, watch, cast("Any", None), controller)  # no server: no model
        waiting = await watch.wait(is_(ev.ApprovalRequested), timeout=60)
        assert isinstance(waiting, ev.ApprovalRequested)
        assert "python train.py" in json.dumps(waiting.arguments)
        await run.shown(lambda app: app.state.pending_approval is not None)
        await pilot.press("e")
        await run.shown(lambda app: isinstance(app.screen, EditArgsScreen))
        app.screen.query_one(TextArea).text = json.dumps({"command": EDITED})
        await pilot.press("ctrl+s")
        result = await watch.wait(is_(ev.ToolResult, call_id=waiting.call_id))
        assert isinstance(result, ev.ToolResult)
        assert result.ok and "edited-ran" in result.output
        # The worker's next thought reads the edited call's result; its check is held too.
        thought = await watch.wait(is_(ev.ModelCall, agent="worker"), after=result.seq)
        assert isinstance(thought, ev.ModelCall) and "edited-ran" in (thought.text or "")
        await run.shown(lambda app: app.state.pending_approval is not None)
        await pilot.press("a")
        finished = await watch.wait(is_(ev.RunFinished), timeout=60)
        async with asyncio.timeout(120):
            while app.result is None:
                await pilot.pause(0.02)
    assert isinstance(finished, ev.RunFinished) and finished.reason == "submitted"
    edit = next(e for e in watch.events if isinstance(e, ev.Control) and e.action == "edit")
    assert edit.arguments == {"command": EDITED}
    # Its report names the call that ran, as edited, not the recipe's it was asked as.
    (report,) = [e for e in watch.events if isinstance(e, ev.ToolCall) and e.tool == "report"]
    summary = str((report.arguments or {})["summary"])
    assert summary.startswith(f"Ran `{EDITED}` (as the user edited it)"), summary
