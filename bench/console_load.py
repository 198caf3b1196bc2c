"""The console under load: key latency while a command floods its output, and
memory over a very long run.

1. Key latency. A live run (scripted model server on loopback, real SDK, real
   sandbox) whose command prints about 10,000 lines a second for several
   seconds; meanwhile a key opens and closes the help screen, and the time from
   the key press until the screen has changed is measured. Target: 100 ms.
2. Memory. A recorded run of many steps is fed to the console in batches, as a
   day-long run would be; the process's resident memory is read as it grows.
   Target: bounded (old transcript entries stay in the log, not in widgets).

    python bench/console_load.py [--steps 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.apps.app import MlraApp
from mlra.console.screens.screens import HelpScreen
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

TASK = Path(__file__).resolve().parent.parent / "tests" / "data" / "tasks" / "answer"
FLOOD = (
    "import os, sys, time\n"
    "end = time.time() + 300\n"
    "i = 0\n"
    "while time.time() < end and not os.path.exists(STOP):\n"
    "    sys.stdout.write(''.join(f'step {i + k} loss 1.234 lr 3e-4 tokens/s 12345\\n' for k in range(100)))\n"
    "    sys.stdout.flush()\n"
    "    i += 100\n"
    "    time.sleep(0.01)\n"
)


async def key_latency(presses: int) -> list[float]:
    # The flood runs until the presses are done (a slow machine, or a profiler, once
    # outlasted a fixed one and the bench waited on a help screen that never came).
    stop = Path(tempfile.mkdtemp(prefix="mlra-flood-")) / "stop"
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("flood", call("python", code=FLOOD.replace("STOP", repr(str(stop))))),
            turn("", call("report", summary="ok")),
        ],
    }
    latencies: list[float] = []
    with ScriptedModelServer(script) as server, tempfile.TemporaryDirectory() as tmp:
        provider = resolve_model("openai/bench", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer", model="openai/bench", runs_dir=Path(tmp), isolation="none"
        )
        controller = RunController(config, load_task(TASK), provider)
        controller.prepare()
        flooding = asyncio.Event()
        controller.subscribe(lambda e: flooding.set() if isinstance(e, ev.ToolOutput) else None)
        app = MlraApp(controller=controller, make_agent=agent_for)
        async with app.run_test(size=(160, 48)):
            await flooding.wait()
            for _ in range(presses):
                # The key goes in as the terminal driver delivers keys (Pilot.press would
                # also wait for the app to be idle, which a flooded app never is).
                start = time.perf_counter()
                _key(app, "question_mark", "?")
                while not isinstance(app.screen, HelpScreen):  # noqa: ASYNC110 - polling is the measurement
                    await asyncio.sleep(0.001)
                latencies.append(time.perf_counter() - start)
                _key(app, "escape", None)
                while isinstance(app.screen, HelpScreen):  # noqa: ASYNC110
                    await asyncio.sleep(0.001)
                await asyncio.sleep(0.1)
            lines = sum(
                len(e.text.splitlines())
                for e in _events(controller)
                if isinstance(e, ev.ToolOutput)
            )
            stop.touch()
            controller.request_stop(evaluate=False)
            while app.result is None:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        await provider.aclose()
    print(f"  lines printed while measuring: {lines:,}")
    return latencies


def _key(app: MlraApp, key: str, char: str | None) -> None:
    from textual import events

    event = events.Key(key, char)
    event.set_sender(app)
    assert app._driver is not None
    app._driver.send_message(event)


def _events(controller: RunController) -> list[ev.Event]:
    from mlra.agent.record.eventlog import read_events

    return read_events(controller.run_dir / "events.jsonl")


def synthetic_steps(n: int):  # type: ignore[no-untyped-def]
    t = 0.0
    seq = 0

    def stamp(event: ev.Event) -> ev.Event:
        nonlocal seq
        seq += 1
        event.seq, event.t = seq, t
        return event

    yield stamp(
        ev.RunStarted(
            run_id="bench",
            task="tiny-lm",
            task_title="bench",
            model="bench",
            limits=ev.Limits(time_limit_s=86_400),
            sandbox=ev.SandboxInfo(
                kind="local", isolation="none", network=False, workdir="/w", workspace="/w"
            ),
        )
    )
    for i in range(n):
        t += 4.0
        cid = f"c{i}"
        yield stamp(
            ev.WorkerThought(
                text=f"Step {i}: I will look at the loss curve again and adjust the learning rate. "
                * 3,
                turn=i,
                step=i,
            )
        )
        yield stamp(
            ev.ToolCall(
                call_id=cid,
                agent="worker",
                tool="bash",
                arguments={"command": f"python train.py --step {i}"},
            )
        )
        for k in range(5):
            yield stamp(
                ev.ToolOutput(
                    call_id=cid,
                    text="".join(f"epoch {k} batch {b} loss 1.2345\n" for b in range(40)),
                )
            )
        yield stamp(
            ev.ToolResult(
                call_id=cid,
                tool="bash",
                agent="worker",
                ok=True,
                output="loss 1.2\n" * 50,
                exit_code=0,
                duration_s=3.0,
            )
        )
        yield stamp(
            ev.ResourceSample(
                cpu_percent=50, ram_used_mb=1000, ram_total_mb=24000, disk_workspace_mb=10
            )
        )


async def memory(steps: int) -> list[tuple[int, float]]:
    process = psutil.Process()
    readings: list[tuple[int, float]] = []
    app = MlraApp(events=[])
    async with app.run_test(size=(160, 48)) as pilot:
        batch: list[ev.Event] = []
        done = 0
        for event in synthetic_steps(steps):
            batch.append(event)
            if isinstance(event, ev.ResourceSample):
                done += 1
                if done % 50 == 0:
                    for e in batch:
                        app.display_.on_event(e)
                    app._render_batch(app.display_.take())
                    batch = []
                    await pilot.pause()
                if done % max(1, steps // 8) == 0:
                    readings.append((done, process.memory_info().rss / 2**20))
        print(f"  transcript widgets at the end: {app.query_one('#transcript').entry_count()}")
    return readings


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--presses", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20_000)
    args = parser.parse_args()
    print("key latency while a command floods its output:")
    lat = asyncio.run(key_latency(args.presses))
    print(
        f"  median {statistics.median(lat) * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms over {len(lat)} presses"
    )
    print(f"memory over a long run ({args.steps:,} agent steps, {args.steps * 9:,} events):")
    for done, rss in asyncio.run(memory(args.steps)):
        print(f"  after {done:>7,} steps: {rss:7.0f} MB resident")


if __name__ == "__main__":
    main()
