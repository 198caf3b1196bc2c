"""Token counts mlra estimated are marked wherever they are shown (issue 25).

A server that sends no counts (many local servers) has its tokens estimated at four
characters a token; the event log marks each call (`tokens_estimated`), and now so do
`result.json`, the console's Resources pane, `mlra runs` and the batch report: an
estimate never passes for the server's count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.record.run_result import result_of
from mlra.agent.record.state import RunState
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.batch.report_rows import collect, summarize
from mlra.batch.report_tables import markdown
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.cli.cli import main
from mlra.console.panes.resources import context_gauge
from mlra.console.text.replay import ReplayModel
from mlra.counts import format_tokens
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn


def uncounted(*turns: dict[str, Any]) -> list[dict[str, Any]]:
    """The turns as a server that sends no token counts answers them."""
    return [{**t, "no_usage": True} for t in turns]


def supervisor_uncounted() -> list[dict[str, Any]]:
    return uncounted(
        turn("", call("assign_subtask", step_id="1", instructions="Write 42 into answer.txt.")),
        turn("", call("submit", path="answer.txt", note="the answer")),
    )


async def _uncounted_run(runs: Path, answer_task: Path) -> Path:
    worker = uncounted(
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    )
    script = {"supervisor": supervisor_uncounted(), "worker": worker}
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/local", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer", model="openai/local", runs_dir=runs, run_id="r", isolation="none"
        )
        result = await RunController(config, load_task(answer_task), provider).run(agent_for)
        await provider.aclose()
    assert result.reason == "submitted", result.message
    return runs / "r"


async def test_an_uncounted_run_s_tokens_are_marked_estimated_everywhere(
    tmp_path: Path, answer_task: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = await _uncounted_run(tmp_path / "runs", answer_task)

    result = json.loads((run_dir / "result.json").read_text())
    assert result["tokens"] > 0
    assert result["tokens_estimated"] is True
    assert result["estimated_tokens"] == result["tokens"]

    assert main(["runs", "--runs-dir", str(tmp_path / "runs")]) == 0
    out, err = capsys.readouterr()
    header, line = out.splitlines()
    cells = line.split()
    tokens_cell = cells[header.split().index("tokens") - 1]  # "best val." is two words
    assert tokens_cell == format_tokens(result["tokens"], estimated=True)
    assert tokens_cell.startswith("~")
    assert "~ estimated" in err

    app = ReplayApp(ReplayModel.open(run_dir))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("end")
        await pilot.pause()
        pane = str(app.query_one("#resources", Static).content)
    # The context gauge holds the latest turn's prompt, an estimate like every count here.
    assert "Ctx  ~" in pane


def _call(tokens: int, *, estimated: bool, purpose: str = "turn") -> ev.ModelCall:
    return ev.ModelCall(
        agent="worker",
        model="m",
        input_tokens=tokens,
        output_tokens=10,
        tokens_estimated=estimated,
        purpose=purpose,  # pyright: ignore[reportArgumentType]
    )


def test_a_count_the_server_sent_stays_unmarked_and_one_estimate_marks_the_total() -> None:
    state = RunState(context_window=32_768)
    state.apply(_call(4_490, estimated=False))
    assert not result_of(state).tokens_estimated
    gauge = context_gauge(state, 30)
    assert gauge is not None and " 4.5k/32.8k" in gauge.plain and "~" not in gauge.plain

    state.apply(_call(4_990, estimated=True))
    result = result_of(state)
    assert result.tokens_estimated and result.estimated_tokens == 5_000
    gauge = context_gauge(state, 30)
    assert gauge is not None and " ~5.0k/32.8k" in gauge.plain

    # A cut-off call's tokens are always an estimate.
    cut = RunState()
    cut.apply(ev.ModelError(agent="worker", model="m", error="cut", cut_off="stop", input_tokens=9))
    assert result_of(cut).estimated_tokens == 9


async def test_the_batch_report_marks_a_total_that_holds_estimates(
    tmp_path: Path, answer_task: Path
) -> None:
    await _uncounted_run(tmp_path / "runs", answer_task)
    rows = collect(tmp_path / "runs")
    report = markdown(summarize(rows), rows)
    assert " | ~" in report
    assert "~ tokens: some runs' counts are mlra's estimates" in report
