"""How many bytes of log a model answer with a large tool argument costs, and how
large a chatty run's log grows, with and without its size budget.

One worker turn: the model writes a thought and calls `write_file` with a large
`content`; the call waits for approval, runs and returns. Its events are written
through `EventLog` as a run writes them, and the file's size compared with the
same events written whole (each text in every event that shows it, as logs did
before the log stored each text once). Sizes, not times: the figure is exact.

`--run`: a scripted model (loopback server, real OpenAI SDK, the real worker and
sandbox) runs `--steps` commands that each print `--output-kb` of output, then
answers and submits, once under `--budget-mb` (`--log-budget`) and once with no
budget: each log's size, its events, the run's wall time, the score, and how long
reading the log back takes (what `mlra replay` and `mlra runs` pay for its size).

    python bench/log_size.py [--mb 10]
    python bench/log_size.py --run [--steps 120] [--output-kb 1024] [--budget-mb 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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


TASK = Path(__file__).resolve().parent.parent / "tests" / "data" / "tasks" / "answer"
SUMMARY = "SUMMARY: the worker printed logs; nothing failed. " * 6


async def chatty_run(steps: int, output_kb: int, budget_mb: float, runs: Path) -> None:
    """One scripted run whose every command prints `output_kb`; prints its log's figures."""
    from mlra.agent.agents.run import agent_for
    from mlra.agent.providers import resolve_model
    from mlra.agent.run.controller import RunController
    from mlra.agent.setup.config import RunConfig
    from mlra.tasks.spec import load_task
    from tests.fakes.model_server import ScriptedModelServer
    from tests.scripts import call, turn

    lines = output_kb * 1024 // 64
    code = "import sys\nfor i in range({n}):\n    sys.stdout.write(f'{{i:08d}} {s:05d} ' + 'x' * 49 + '\\n')\n"
    worker = [
        turn(f"print {s}", call("python", code=code.format(n=lines, s=s))) for s in range(steps)
    ]
    worker += [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("submit", path="answer.txt", note="the answer")),
    ]
    script = {"worker": worker, "summarizer:fallback": SUMMARY}
    started = time.perf_counter()
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/bench", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer", model="openai/bench", runs_dir=runs, isolation="none",
            agent="worker", log_budget_mb=budget_mb, time_limit_s=3600.0,
        )  # fmt: skip
        controller = RunController(config, load_task(TASK), provider)
        result = await controller.run(agent_for)
        await provider.aclose()
    wall = time.perf_counter() - started
    log = controller.run_dir / "events.jsonl"
    read_started = time.perf_counter()
    events = read_events(log)
    read_s = time.perf_counter() - read_started
    results = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "python"]
    cut = sum(e.log_budget_chars is not None for e in results)
    unlogged = sum(e.unlogged_chars for e in results)
    mb = 1024 * 1024
    budget = f"{budget_mb:g} MB budget" if budget_mb else "no budget"
    print(
        f"{budget}: log {log.stat().st_size / mb:.1f} MB, {len(events):,} events, "
        f"{cut} of {len(results)} results cut, {unlogged / mb:.0f} MB of output left to "
        f"the console; {result.reason}, score {result.score}; run {wall:.0f} s, "
        f"log read back in {read_s:.1f} s; load {os.getloadavg()[0]:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mb", type=float, default=10.0, help="size of the argument")
    parser.add_argument("--run", action="store_true", help="a chatty run's log, budget or not")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--output-kb", type=int, default=1024, help="each command's output")
    parser.add_argument("--budget-mb", type=float, default=64.0)
    args = parser.parse_args()
    if args.run:
        for budget in (args.budget_mb, 0.0):
            with tempfile.TemporaryDirectory() as tmp:
                asyncio.run(chatty_run(args.steps, args.output_kb, budget, Path(tmp)))
        return
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
