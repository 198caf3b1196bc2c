"""The footer offers only keys that do something for this run: a `--model baseline`
run's footer offered "i Msg worker", and pressing it only said the baseline reads no
messages. A run with a model still offers it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.apps.app import MlraApp
from mlra.console.screens.screens import HelpScreen
from mlra.tasks.spec import load_task
from tests.console.test_console_controls import ANSWER, REPORT, Live, Watch, is_, live, worker
from tests.console.test_footer_keys import footer_keys
from tests.fakes.model_server import ScriptedModelServer


async def test_a_baseline_run_offers_no_message_key(tmp_path: Path, answer_task: Path) -> None:
    config = RunConfig(
        task="answer", model="baseline", runs_dir=tmp_path, isolation="none", start_paused=True
    )
    controller = RunController(config, load_task(answer_task), None)
    controller.prepare()
    watch = Watch(controller)
    app = MlraApp(controller=controller, make_agent=agent_for)
    async with app.run_test(size=(160, 48)) as pilot:
        with ScriptedModelServer({}) as server:  # unused: Live wants one
            run = Live(app, pilot, watch, server, controller)
            await watch.wait(is_(ev.Control, action="pause", source="start"))
            # The footer is redrawn as the run's phase changes: wait for the paused one.
            await run.shown(
                lambda app: (
                    app.state.phase == "paused"
                    and "n" in footer_keys(app)
                    and "i" not in footer_keys(app)
                )
            )
            await pilot.press("question_mark")  # nor does the help list it
            await run.shown(lambda app: isinstance(app.screen, HelpScreen))
            help_screen = app.screen
            assert isinstance(help_screen, HelpScreen)
            assert "Msg worker" not in [k.label for k in help_screen.keys]
            await pilot.press("escape")
            await run.shown(lambda app: not isinstance(app.screen, HelpScreen))
            await pilot.press("i")  # pressed anyway, it says why
            await run.shown(
                lambda app: any("reads no messages" in str(n.message) for n in app._notifications)
            )
            await pilot.press("space")
            assert (await run.finished()).reason == "submitted"
            async with asyncio.timeout(120):
                while app.result is None:
                    await pilot.pause(0.02)


async def test_a_model_run_offers_the_message_key(tmp_path: Path, answer_task: Path) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), start_paused=True) as run:
        await run.watch.wait(is_(ev.Control, action="pause", source="start"))
        await run.shown(lambda app: app.state.phase == "paused" and "i" in footer_keys(app))
        await run.pilot.press("space")
        await run.finished()
