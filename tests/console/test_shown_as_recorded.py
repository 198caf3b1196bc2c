"""What the console (live, attached, replay) and the headless transcript show of a model's
answer is what the run's log recorded of it: one source of truth.

The runs are real (the scripted model server on loopback, the real OpenAI SDK), with the
answers streamed as llama-server streamed qwen2.5-coder-0.5b's (`--jinja`): the call
written as text in content pieces, no native tool call.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.state import fold
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.panes.status import activity
from mlra.console.panes.transcript_entries import ThoughtEntry, ToolEntry
from mlra.console.text.headless import TranscriptDisplay
from mlra.console.text.replay import ReplayModel
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn


async def _run(
    tmp_path: Path, task: Path, script: dict[str, Any], **settings: Any
) -> list[ev.Event]:
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/local", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer",
            model="openai/local",
            runs_dir=tmp_path,
            run_id="r",
            isolation="none",
            agent="worker",
            **settings,
        )
        await RunController(config, load_task(task), provider).run(agent_for)
        await provider.aclose()
    return read_events(tmp_path / "r" / "events.jsonl")


def _headless(events: list[ev.Event]) -> str:
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    for event in events:
        display.on_event(event)
    return out.getvalue()


async def _replayed_calls(run_dir: Path) -> list[str]:
    app = ReplayApp(ReplayModel.open(run_dir))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("end")
        await pilot.pause()
        return [str(e.content) for e in app.query(ToolEntry)]


async def test_a_call_its_tool_refuses_shows_as_written_not_as_what_would_run(
    tmp_path: Path, answer_task: Path
) -> None:
    """The model wrote `submit` with a `file` the tool does not take (qwen2.5-coder-0.5b,
    llama-server): the log recorded that call, which submitted nothing, and the console
    and transcript said `submit (default artifact)`, a call that would have ended the
    run. A `note` of the wrong type read as `submit answer.txt` the same way."""
    as_text = '```json\n{"name": "submit", "arguments": {"file": "answer.txt"}}\n```'
    script = {
        "worker": [
            turn(as_text),
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("submit", path="answer.txt", note=42)),
            turn("", call("submit", path="answer.txt")),
        ]
    }
    events = await _run(tmp_path, answer_task, script)
    calls = [e for e in events if isinstance(e, ev.ToolCall) and e.tool == "submit"]
    assert [c.arguments for c in calls] == [
        {"file": "answer.txt"},
        {"path": "answer.txt", "note": 42},
        {"path": "answer.txt"},
    ]
    assert calls[0].refused is not None and "unknown argument 'file'" in calls[0].refused
    assert calls[1].refused is not None and "note" in calls[1].refused
    assert calls[2].refused is None
    results = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "submit"]
    assert [r.ok for r in results] == [False, False, True]
    written = ['submit {"file": "answer.txt"}', 'submit {"path": "answer.txt", "note": 42}']

    text = _headless(events)
    assert all(call in text for call in written), text
    assert "(default artifact)" not in text and text.count("submit answer.txt") == 1

    shown = await _replayed_calls(tmp_path / "r")
    submits = [line for line in shown if "submit" in line]
    assert len(submits) == 3 and all(w in line for w, line in zip(written, submits, strict=False))
    assert "submit answer.txt" in submits[2], submits

    # The status line, while the call with the wrong note was under way.
    at = next(i for i, e in enumerate(events) if e is calls[1])
    line = str(activity(fold(events[: at + 1]), calls[1].t)[0])
    assert '{"path": "answer.txt", "note": 42}' in line, line


async def test_an_answer_asked_again_streams_apart_from_the_one_cut_off(
    tmp_path: Path, answer_task: Path
) -> None:
    """A server killed mid-answer (a line streamed, then the socket closed): the model is
    asked again, and its new answer streamed on after the lost one's text in the same
    `thinking:` entry, one answer that no event of the log holds."""
    lost = "I will write the answer to answer.txt first,\nthen submit it.\n"
    script = {
        "worker": [
            {"drop": True, "times": 1, "text": lost},
            turn("Writing the answer.", call("bash", command="echo 42 > answer.txt")),
            turn("", call("submit", path="answer.txt")),
        ]
    }
    events = await _run(tmp_path, answer_task, script, server_wait_s=60)
    retried = next(i for i, e in enumerate(events) if isinstance(e, ev.ModelRetry))
    assert any(isinstance(e, ev.TextDelta) and e.text == lost for e in events[:retried])
    again = next(i for i, e in enumerate(events) if i > retried and isinstance(e, ev.TextDelta))
    answer = next(e for e in events if isinstance(e, ev.ModelCall) and e.purpose == "turn")
    assert answer.text == "Writing the answer."

    app = ReplayApp(ReplayModel.open(tmp_path / "r"))
    async with app.run_test(size=(160, 48)) as pilot:
        app.model.go(again)  # the answer asked again streams
        app.show_cursor()
        await pilot.pause()
        thoughts = [str(e.content) for e in app.query(ThoughtEntry)]
    streaming = [t for t in thoughts if "thinking: " in t]
    assert len(streaming) == 1 and streaming[0].endswith("thinking: Writing the answer."), thoughts
    cut = [t for t in thoughts if "cut off: " in t]
    assert len(cut) == 1 and "then submit it." in cut[0], thoughts


@pytest.mark.parametrize(
    "failed",
    [
        {"drop": True, "times": 1, "text": "A line the lost connection cut.\n"},
        {"broken": "cut", "times": 1},  # a stream that ends with no finish: "half an ans"
    ],
    ids=["connection lost", "stream unfinished"],
)
async def test_the_text_streamed_for_an_answer_is_that_answer_s_text(
    tmp_path: Path, answer_task: Path, failed: dict[str, Any]
) -> None:
    """The log's `text_delta`s after a retry make up the answer asked again, as its
    `model_call` records it: the text of an unfinished stream, held back until a line's
    end, was logged glued to the next answer's (`half an ansWriting the answer.`)."""
    script = {
        "worker": [
            failed,
            turn("Writing the answer.", call("bash", command="echo 42 > answer.txt")),
            turn("", call("submit", path="answer.txt")),
        ]
    }
    events = await _run(tmp_path, answer_task, script, server_wait_s=60)
    retried = next(i for i, e in enumerate(events) if isinstance(e, ev.ModelRetry))
    before = "".join(e.text for e in events[:retried] if isinstance(e, ev.TextDelta))
    at = next(i for i, e in enumerate(events) if isinstance(e, ev.ModelCall))
    answer = events[at]
    assert isinstance(answer, ev.ModelCall) and answer.purpose == "turn"
    after = "".join(e.text for e in events[retried:at] if isinstance(e, ev.TextDelta))
    assert after == answer.text == "Writing the answer."
    assert before == failed.get("text", "half an ans")


async def test_calls_after_the_one_that_ended_the_subtask_are_said_not_run(
    tmp_path: Path, answer_task: Path
) -> None:
    """Two calls in one answer, `submit` first: the second was answered "not run" to the
    model, but no display said the answer had asked for it."""
    script = {
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("submit", path="answer.txt"), call("bash", command="rm answer.txt")),
        ]
    }
    events = await _run(tmp_path, answer_task, script)
    answer = [e for e in events if isinstance(e, ev.ModelCall) and e.purpose == "turn"][-1]
    assert [c["name"] for c in answer.tool_calls] == ["submit", "bash"]
    assert [e.tool for e in events if isinstance(e, ev.ToolCall)] == ["bash", "submit"]
    text = _headless(events)
    assert "asked for 1 more call after submit (bash): not run" in text
