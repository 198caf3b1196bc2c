"""Replay of a very long run: time to open, time to step, memory.

A synthetic run of 100,000 events (agent steps with streamed thoughts, tool
calls and their output, model calls, resource samples, plan revisions, errors
and workspace snapshots whose contents are in the run's snapshot store) is
written to a run folder; then, with Textual's headless driver:

1. open: reading the log, indexing it and the replay console's first screen.
   Target: under 1 s.
2. stepping: the time from a key press until the console has finished
   redrawing, for single events forward and back, agent steps forward and back,
   and jumps (to a step far away, to the next error). Target: 50 ms.
3. memory: the process's peak resident memory. Target: under 300 MB.

    python bench/replay_load.py [--events 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlra import events as ev
from mlra.agent.record.eventlog import encode_stored
from mlra.agent.record.log_refs import Referrer
from mlra.agent.record.snapshots import SnapshotStore

EPOCH = 1_790_000_000.0


def write_run(run_dir: Path, n_events: int) -> int:
    """A synthetic recorded run of about `n_events` events; returns its worker steps."""
    store = SnapshotStore(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    seq = 0
    t = 0.0
    lines: list[str] = []

    refs = Referrer()

    def add(event: ev.Event) -> None:
        """Written as `EventLog` writes it: thoughts and calls refer to their model call."""
        nonlocal seq
        seq += 1
        event.seq, event.t, event.ts = seq, t, EPOCH + t
        refs.link(event)
        lines.append(encode_stored(event).decode().rstrip("\n"))
        refs.written(event)

    def snapshot(step: int, files: dict[str, str]) -> None:
        changed = []
        for path, text in files.items():
            data = text.encode()
            sha = hashlib.sha256(data).hexdigest()
            target = store.path(sha)
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            changed.append(ev.FileChange(path=path, size=len(data), sha256=sha))
        add(ev.WorkspaceSnapshot(step=step, changed=changed))

    add(
        ev.RunStarted(
            run_id="bench-replay",
            task="tiny-lm",
            task_title="bench",
            model="bench/model",
            limits=ev.Limits(time_limit_s=86_400, max_steps=100_000),
            sandbox=ev.SandboxInfo(
                kind="local", isolation="none", network=False, workdir="/w", workspace="/w"
            ),
        )
    )
    snapshot(0, {"README.md": "# task\n", "train.py": "print('baseline')\n", "data/a.txt": "x\n"})
    step = 0
    while seq < n_events:
        if step % 50 == 0:
            add(ev.SupervisorMessage(text=f"Block {step // 50}: try a new learning rate schedule."))
            add(
                ev.PlanUpdated(
                    steps=[
                        ev.PlanStep(
                            id=str(k),
                            title=f"Stage {k}",
                            status="done" if k < step // 500 else "pending",
                        )
                        for k in range(1, 8)
                    ],
                    reason=f"revision {step // 50}",
                )
            )
        step += 1
        t += 4.0
        cid = f"call_{step}"
        add(ev.StepStarted(agent="worker", step=step, turn=step, prompt=f"[{t:.0f}s elapsed]"))
        for piece in ("Looking at ", "the loss curve ", "again."):
            add(ev.TextDelta(agent="worker", turn=step, text=piece))
        thought = f"Step {step}: looking at the loss curve again."
        arguments = {"command": f"python train.py --lr 3e-4 --seed {step}"}
        asked = {"id": cid, "name": "bash", "arguments": arguments}
        add(
            ev.ModelCall(
                agent="worker",
                model="bench/model",
                turn=step,
                input_tokens=9000,
                output_tokens=200,
                text=thought,
                tool_calls=[{**asked, "raw_arguments": json.dumps(arguments)}],
            )
        )
        add(ev.WorkerThought(text=thought, turn=step, step=step))
        failing = step % 37 == 0
        add(
            ev.ToolCall(
                call_id=cid, agent="worker", tool="bash", arguments=arguments, turn=step, step=step
            )
        )
        for k in range(2 + step % 4):
            add(
                ev.ToolOutput(
                    call_id=cid,
                    text="".join(
                        f"epoch {k} batch {b} loss {1 + b / 100:.4f}\n" for b in range(20)
                    ),
                )
            )
        add(
            ev.ToolResult(
                call_id=cid,
                tool="bash",
                agent="worker",
                ok=not failing,
                output="Traceback: CUDA out of memory\n"
                if failing
                else "val loss 1.23\n[exit code 0]",
                exit_code=1 if failing else 0,
                duration_s=3.0,
            )
        )
        if step % 3 == 0:
            snapshot(
                step,
                {
                    "train.py": f"LR = {step}e-6\nprint('training', LR)\n" * 5,
                    f"logs/run_{step % 40}.txt": f"step {step} loss 1.2\n",
                },
            )
        if step % 2 == 0:
            add(
                ev.ResourceSample(
                    cpu_percent=40 + step % 60,
                    ram_used_mb=6000,
                    ram_total_mb=24000,
                    disk_workspace_mb=12,
                )
            )
    (run_dir / "events.jsonl").write_text("\n".join(lines) + "\n")
    return step


def _key(app: object, key: str, char: str | None) -> None:
    """A key as the terminal driver delivers it (Pilot.press also waits for idle)."""
    from textual import events

    event = events.Key(key, char)
    event.set_sender(app)  # type: ignore[arg-type]
    app._driver.send_message(event)  # type: ignore[attr-defined]


async def measure(run_dir: Path, steps: int) -> dict[str, object]:
    from mlra.console.apps.replay_app import ReplayApp
    from mlra.console.text.replay import ReplayModel

    class TimedApp(ReplayApp):
        """Says when the screen after a move has been drawn."""

        answered: asyncio.Event

        def show_cursor(self) -> None:
            super().show_cursor()
            self.call_after_refresh(self.answered.set)

    start = time.perf_counter()
    model = ReplayModel.open(run_dir)
    loaded = time.perf_counter() - start
    app = TimedApp(model, freeze_gc=True)  # as `mlra replay` runs it
    app.answered = asyncio.Event()
    out: dict[str, object] = {"events": len(model.events), "load_s": loaded}
    async with app.run_test(size=(160, 48)) as pilot:
        await app.answered.wait()
        out["open_s"] = time.perf_counter() - start
        await app.workers.wait_for_complete()
        out["checkpoints_s"] = time.perf_counter() - start
        await pilot.pause()

        async def timed(keys: list[tuple[str, str | None]]) -> list[float]:
            took = []
            for key, char in keys:
                app.answered.clear()
                before = model.cursor
                t0 = time.perf_counter()
                _key(app, key, char)
                try:
                    await asyncio.wait_for(app.answered.wait(), 5)
                except TimeoutError:
                    assert model.cursor == before, f"{key}: moved, yet no screen came"
                    continue  # nothing further that way
                took.append(time.perf_counter() - t0)
                await pilot.pause()
            return took

        model.go(len(model.events) // 2)
        app.show_cursor()
        await pilot.pause()
        out["event_forward"] = await timed([("right", None)] * 100)
        out["event_back"] = await timed([("left", None)] * 100)
        out["step_forward"] = await timed([("right_square_bracket", "]")] * 50)
        out["step_back"] = await timed([("left_square_bracket", "[")] * 50)
        out["next_error"] = await timed([("e", "e")] * 20)
        out["next_tool_call"] = await timed([("t", "t")] * 20)
        jumps = []
        for target in (1, steps, steps // 3, 2 * steps // 3, 10, steps - 5) * 3:
            app.answered.clear()
            t0 = time.perf_counter()
            model.goto_step(target)
            app.show_cursor()
            await app.answered.wait()
            jumps.append(time.perf_counter() - t0)
            assert model.state.steps == target, (model.state.steps, target)
            await pilot.pause()
        out["jump"] = jumps
        t0 = time.perf_counter()
        found = model.search("out of memory")
        out["search_s"] = time.perf_counter() - t0
        out["search_hits"] = len(found)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


NAMES = (
    "event_forward",
    "event_back",
    "step_forward",
    "step_back",
    "next_error",
    "next_tool_call",
    "jump",
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:  # the child: its peak memory is the replay's alone
        print(json.dumps(asyncio.run(measure(args.measure, args.steps))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "bench-replay"
        steps = write_run(run_dir, args.events)
        size = (run_dir / "events.jsonl").stat().st_size / 2**20
        print(f"synthetic run: {args.events:,} events, {steps:,} worker steps, {size:.0f} MB log")
        child = subprocess.run(
            [sys.executable, __file__, "--measure", str(run_dir), "--steps", str(steps)],
            capture_output=True,
            text=True,
        )
        if child.returncode:
            sys.exit(f"the replay's measurement failed:\n{child.stderr}")
        r = json.loads(child.stdout.strip().splitlines()[-1])
    print(
        f"open: {r['open_s']:.2f} s to the first screen (reading and indexing the log "
        f"{r['load_s']:.2f} s); state checkpoints done in the background at {r['checkpoints_s']:.2f} s"
    )
    for name in NAMES:
        ms = [x * 1000 for x in r[name]]
        print(
            f"{name.replace('_', ' '):>15}: median {statistics.median(ms):5.1f} ms, "
            f"max {max(ms):5.1f} ms over {len(ms)}"
        )
    print(f"search of the whole transcript: {r['search_s']:.2f} s ({r['search_hits']} matches)")
    print(f"peak memory: {r['peak_rss_mb']:.0f} MB resident")


if __name__ == "__main__":
    main()
