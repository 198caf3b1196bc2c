"""How many bytes of log a model answer with a large tool argument costs.

One worker turn: the model writes a thought and calls `write_file` with a large
`content`; the call waits for approval, runs and returns. Its events are written
through `EventLog` as a run writes them, and the file's size compared with the
same events written whole (each text in every event that shows it, as logs did
before the log stored each text once). Sizes, not times: the figure is exact.

    python bench/log_size.py [--mb 10]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import EventLog, encode_event, read_events


def turn(content: str) -> list[ev.Event]:
    arguments = {"path": "data.txt", "content": content}
    thought = "I will write the data file, then check it."
    asked = {
        "id": "w-1",
        "name": "write_file",
        "arguments": arguments,
        "raw_arguments": json.dumps(arguments),
    }
    return [
        ev.ModelCall(agent="worker", model="m", text=thought, tool_calls=[asked]),
        ev.WorkerThought(text=thought, step=1),
        ev.ToolCall(call_id="w-1", agent="worker", tool="write_file", arguments=arguments),
        ev.ApprovalRequested(call_id="w-1", tool="write_file", arguments=arguments),
        ev.ToolResult(call_id="w-1", tool="write_file", agent="worker", ok=True, output="ok"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=10.0, help="size of the argument")
    args = parser.parse_args()
    content = "x" * int(args.mb * 1_000_000)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        log = EventLog(path)
        for event in turn(content):
            log.append(event)
        log.close()
        stored = path.stat().st_size
        whole = sum(len(encode_event(e)) for e in read_events(path))
        read_back = read_events(path)
    (tool_call,) = [e for e in read_back if isinstance(e, ev.ToolCall)]
    assert tool_call.arguments is not None and tool_call.arguments["content"] == content
    mb = 1_000_000
    print(f"argument: {len(content) / mb:.1f} MB")
    print(f"log, each text once: {stored / mb:.1f} MB")
    print(f"log, every copy written (schema 1): {whole / mb:.1f} MB")


if __name__ == "__main__":
    main()
