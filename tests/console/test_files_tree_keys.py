"""Space in the Files tree does what Enter does there: it opens or closes a folder, and
shows a file's preview; the console's Space (pause, resume) is for elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Tree

from mlra import events as ev
from mlra.console.panes.files import FilesPane
from tests.console.test_console_controls import is_, live, worker
from tests.scripts import call, turn

MAKE_FOLDER = turn("", call("bash", command="mkdir -p data && echo 1 > data/a.txt"))
WAIT = turn("", call("bash", command="until [ -f go ]; do sleep 0.05; done"))


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
async def test_space_on_a_folder_in_the_files_tree_opens_it(
    tmp_path: Path, answer_task: Path, size: tuple[int, int]
) -> None:
    async with live(tmp_path, answer_task, worker(MAKE_FOLDER, WAIT)) as run:
        await run.pilot.resize_terminal(*size)
        await run.watch.wait(is_(ev.ToolResult, tool="bash"))
        pane = run.app.query_one(FilesPane)
        tree = run.app.query_one("#files-tree", Tree)
        await run.pilot.press("F")  # to the tree (narrow: shown in the transcript's place)
        await run.shown(lambda app: app.focused is tree)
        await run.shown(lambda app: "data" in pane._tree_nodes)
        folder = pane._tree_nodes["data"]
        assert not folder.is_expanded
        # Straight after F, as a person does: the cursor is on the first line (the
        # folder); it was on none, and Space acted on the last line, a file: nothing.
        await run.pilot.press("space")
        await run.shown(lambda app: folder.is_expanded)
        assert not run.controller.controls.paused
        await run.pilot.press("space")
        await run.shown(lambda app: not folder.is_expanded)
        assert run.watch.count(is_(ev.Control, action="pause")) == 0
        await run.pilot.press("enter")  # Enter does the same
        await run.shown(lambda app: folder.is_expanded)
