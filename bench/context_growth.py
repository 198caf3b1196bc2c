"""How large the worker's requests grow over one long subtask, at several context windows.

A scripted model (loopback server, real OpenAI SDK, the real agent and sandbox) runs
one subtask of many steps, each a command that prints 60 short lines of log, then
writes the answer and reports; the summarizer writes about 100 words. For each
window (set as `--context-window` sets it) the largest worker request is measured:
its bytes, its prompt tokens as the server counts them (bytes / 4) with the answer
budget it asked for, that sum's share of the window, and how often the history was
summarized. Target: every request and its answer budget inside the window, and a
summary every few steps, not every step.

    python bench/context_growth.py [--steps 500] [--windows 8192,32768,200000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import ModelSettings, resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, plan, turn

TASK = Path(__file__).resolve().parent.parent / "tests" / "data" / "tasks" / "answer"
SUMMARY = "SUMMARY: the worker listed logs and saw their lines; nothing failed. " * 6


@dataclass
class Growth:
    window: int
    requests: int
    largest_bytes: int
    largest_tokens: int
    """Prompt tokens as the server counts them (bytes / 4) plus the answer budget asked."""
    summaries: int
    score: float | None
    seconds: float


def script(steps: int) -> dict[str, object]:
    worker = [
        turn(f"look {n}", call("bash", command=f"seq -f 'step {n} line %g' 60"))
        for n in range(steps)
    ]
    worker += [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]
    return {
        "supervisor": [
            turn("", plan("Answer the question", "Submit")),
            turn("", call("assign_subtask", step_id="1", instructions="Read the logs, answer.")),
            turn("", call("submit", path="answer.txt", note="the answer")),
        ],
        "worker": worker,
        "summarizer:fallback": SUMMARY,
    }


Isolation = Literal["none", "bwrap", "auto"]


async def measure(steps: int, window: int, isolation: Isolation, runs_dir: Path) -> Growth:
    started = time.perf_counter()
    with ScriptedModelServer(script(steps)) as server:
        provider = resolve_model(
            "openai/bench",
            base_url=server.url_for("openai"),
            env={},
            settings=ModelSettings(context_window=window),
        )
        config = RunConfig(
            task="answer",
            model="openai/bench",
            runs_dir=runs_dir,
            isolation=isolation,
            context_window=window,
            context_window_from="setting",
            max_output_tokens=provider.max_output_tokens,
            subtask_max_steps=steps + 10,
            review_every=steps + 10,
            max_steps=steps + 20,
        )
        controller = RunController(config, load_task(TASK), provider)
        result = await controller.run(agent_for)
        await provider.aclose()
        requests = server.requests_for("worker")
    sizes = []
    for request in requests:
        raw = len(json.dumps(request.body))
        wanted = int(
            request.body.get("max_tokens") or request.body.get("max_completion_tokens") or 0
        )
        sizes.append((raw, raw // 4 + wanted))
    events = read_events(controller.run_dir / "events.jsonl")
    return Growth(
        window=window,
        requests=len(requests),
        largest_bytes=max(b for b, _ in sizes),
        largest_tokens=max(t for _, t in sizes),
        summaries=sum(isinstance(e, ev.HistorySummarized) for e in events),
        score=result.score,
        seconds=time.perf_counter() - started,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=500, help="worker steps in the subtask")
    parser.add_argument("--windows", default="8192,32768,200000", help="context windows, tokens")
    parser.add_argument("--isolation", default="none", choices=["none", "bwrap", "auto"])
    args = parser.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for window in windows:
            isolation = cast(Isolation, args.isolation)
            rows.append(asyncio.run(measure(args.steps, window, isolation, Path(tmp))))
    print(f"one subtask of {args.steps} steps, 60 lines of log each ({args.isolation} isolation)")
    header = f"{'window':>8} {'largest request':>16} {'+ answer, tokens':>17} {'of window':>10}"
    print(header + f" {'summaries':>10} {'requests':>9} {'score':>6} {'time':>7}")
    for g in rows:
        print(
            f"{g.window:>8,} {g.largest_bytes:>13,} B {g.largest_tokens:>17,} "
            f"{g.largest_tokens / g.window:>10.0%} {g.summaries:>10} {g.requests:>9} "
            f"{'-' if g.score is None else f'{g.score:g}':>6} {g.seconds:>6.0f}s"
        )


if __name__ == "__main__":
    main()
