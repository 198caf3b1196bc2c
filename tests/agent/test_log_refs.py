"""The log stores each text once: a model's answer and its tool calls' arguments
live in the `model_call`; thoughts, messages, tool calls and approvals refer to
it, and every reader (resume, replay, reports) gets whole events back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import EventLog, LogDamage, read_events
from mlra.console.text.recorded_log import RecordedLog
from mlra.console.text.replay import ReplayModel
from tests.conftest import ANSWER_TASK, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

BIG = "x" * 1_000_000
THOUGHT = "I will write a large file, marked THOUGHT-7c1e, then answer."


def _worker() -> list[dict]:
    return [
        turn(THOUGHT, call("write_file", path="big.txt", content=BIG)),
        turn("Write the answer.", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]


@pytest.fixture(scope="module")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("big")
    script = {"supervisor": supervisor_answering(), "worker": _worker()}
    with ScriptedModelServer(script) as server:
        proc = mlra_cli(
            [
                "run", str(ANSWER_TASK), "--model", "openai/test-model",
                "--base-url", server.url_for("openai"), "--no-tui",
                "--runs-dir", str(tmp / "runs"), "--isolation", "none",
            ],
            cwd=tmp,
            timeout=120,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (tmp / "runs").iterdir()
    return run_dir


def test_a_large_tool_argument_is_stored_once(big_run: Path) -> None:
    log = big_run / "events.jsonl"
    # The argument is in the model's answer once; the tool call points to it.
    assert log.stat().st_size < 1.5 * len(BIG)
    assert log.read_bytes().count(BIG.encode()) == 1
    events = read_events(log)
    (write,) = [e for e in events if isinstance(e, ev.ToolCall) and e.tool == "write_file"]
    assert write.arguments == {"path": "big.txt", "content": BIG}
    assert write.arguments_of is not None
    source = events[write.arguments_of - 1]
    assert isinstance(source, ev.ModelCall) and source.agent == "worker"
    assert (big_run / "workspace" / "big.txt").read_text() == BIG


def test_a_thought_is_stored_in_its_model_call_and_read_back_whole(big_run: Path) -> None:
    lines = (big_run / "events.jsonl").read_bytes().splitlines()
    stored = [json.loads(line) for line in lines if b'"worker_thought"' in line]
    assert stored and all("text" not in e and isinstance(e["text_of"], int) for e in stored)
    holding = [json.loads(line)["type"] for line in lines if b"THOUGHT-7c1e" in line]
    # The streamed pieces may hold the marker too; no thought copies it.
    assert "model_call" in holding and "worker_thought" not in holding

    events = read_events(big_run / "events.jsonl")
    thoughts = [e.text for e in events if isinstance(e, ev.WorkerThought)]
    assert THOUGHT in thoughts
    messages = [e.text for e in events if isinstance(e, ev.SupervisorMessage)]
    assert "I will plan first." in messages


def test_replay_shows_and_finds_referenced_text(big_run: Path) -> None:
    model = ReplayModel(RecordedLog.read(big_run / "events.jsonl"), run_dir=big_run)
    matches = model.search("thought-7c1e")
    found = [model.events[i] for i in matches]
    assert any(isinstance(e, ev.WorkerThought) and e.text == THOUGHT for e in found)
    calls = [model.events[i] for i in model.search("big.txt")]
    assert any(
        isinstance(e, ev.ToolCall) and e.arguments and e.arguments["content"] == BIG for e in calls
    )


def test_resume_rebuilds_the_history_from_a_compact_log(big_run: Path) -> None:
    from mlra.agent.record.recording import response_from

    events = read_events(big_run / "events.jsonl")
    answers = [e for e in events if isinstance(e, ev.ModelCall) and e.agent == "worker"]
    rebuilt = response_from(answers[0])
    assert rebuilt.text == THOUGHT
    assert rebuilt.tool_calls[0].arguments == {"path": "big.txt", "content": BIG}
    # In the file the arguments are the model's raw text only.
    line = (big_run / "events.jsonl").read_bytes().splitlines()[answers[0].seq - 1]
    assert json.loads(line)["tool_calls"][0].keys() == {"id", "name", "raw_arguments"}


def _write(path: Path, events: list[ev.Event]) -> list[ev.Event]:
    log = EventLog(path)
    try:
        return [log.append(e) for e in events]
    finally:
        log.close()


def _answer(text: str, arguments: dict, raw: str | None = None) -> ev.ModelCall:
    asked = {"id": "c1", "name": "bash", "arguments": arguments}
    asked["raw_arguments"] = raw if raw is not None else json.dumps(arguments)
    return ev.ModelCall(agent="worker", model="m", text=text, tool_calls=[asked])


def test_what_differs_from_the_answer_is_stored_as_it_is(tmp_path: Path) -> None:
    written = _write(
        tmp_path / "events.jsonl",
        [
            _answer("think", {"command": "ls"}),
            ev.WorkerThought(text="something else"),
            ev.ToolCall(call_id="c1", agent="worker", tool="bash", arguments={"command": "rm"}),
            ev.ApprovalRequested(call_id="c1", tool="bash", arguments={"command": "ls"}),
        ],
    )
    thought, edited, approval = written[1:]
    assert isinstance(thought, ev.WorkerThought) and thought.text_of is None
    assert isinstance(edited, ev.ToolCall) and edited.arguments_of is None
    assert isinstance(approval, ev.ApprovalRequested) and approval.arguments_of == 1
    read = read_events(tmp_path / "events.jsonl")
    assert [e.model_dump() for e in read] == [e.model_dump() for e in written]


def test_raw_arguments_that_are_not_plain_json_keep_their_parsed_form(tmp_path: Path) -> None:
    # Whitespace and key order are the model's: the raw text is kept byte for byte,
    # and arguments that are not just that text read as JSON are stored too.
    raw = '{ "command" :"ls" }'
    written = _write(tmp_path / "events.jsonl", [_answer("", {"command": "ls"}, raw)])
    line = json.loads((tmp_path / "events.jsonl").read_bytes())
    assert (
        line["tool_calls"][0]["raw_arguments"] == raw and "arguments" not in line["tool_calls"][0]
    )
    assert read_events(tmp_path / "events.jsonl")[0].model_dump() == written[0].model_dump()

    repaired = _answer("", {"command": "ls"}, '{"command": "ls"')  # not JSON: kept both
    _write(tmp_path / "other.jsonl", [repaired])
    line = json.loads((tmp_path / "other.jsonl").read_bytes())
    assert line["tool_calls"][0]["arguments"] == {"command": "ls"}


def test_an_old_log_with_copies_still_reads(tmp_path: Path) -> None:
    old = [
        {"v": 1, "seq": 1, "ts": 1.0, "t": 0.0, "type": "model_call", "agent": "worker",
         "model": "m", "text": "hi", "tool_calls": [
             {"id": "c1", "name": "bash", "arguments": {"command": "ls"},
              "raw_arguments": '{"command": "ls"}'}]},
        {"v": 1, "seq": 2, "ts": 1.0, "t": 0.0, "type": "worker_thought", "text": "hi"},
        {"v": 1, "seq": 3, "ts": 1.0, "t": 0.0, "type": "tool_call", "call_id": "c1",
         "agent": "worker", "tool": "bash", "arguments": {"command": "ls"}},
    ]  # fmt: skip
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in old))
    events = read_events(path)
    assert isinstance(events[1], ev.WorkerThought) and events[1].text == "hi"
    assert isinstance(events[2], ev.ToolCall) and events[2].arguments == {"command": "ls"}
    assert RecordedLog.read(path)[1] == events[1]


def test_a_reference_to_nothing_is_damage_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    lines = [
        {"v": 2, "seq": 1, "ts": 1.0, "t": 0.0, "type": "notice", "message": "hello"},
        {"v": 2, "seq": 2, "ts": 1.0, "t": 0.0, "type": "worker_thought", "text_of": 1},
    ]
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    with pytest.raises(LogDamage) as caught:
        read_events(path)
    assert caught.value.line == 2 and "seq 1, which is not a model call" in str(caught.value)
    # The replay goes on and shows the damage where it is.
    shown = RecordedLog.read(path)[1]
    assert isinstance(shown, ev.Notice) and shown.level == "error"
