"""`mlra share` on a large log: the page's size against its budget, the time, and the
sharing process's peak memory (the log is streamed, so memory must not grow with it).

Writes a synthetic run of `--mb` MB in a temporary folder (steps of a model's streamed
words, a command's output streamed and whole, 1 MB, and 400 curve points a step), then
runs `python -m mlra share` on it in a child process and prints the figures with the
machine's load. The page is checked the way tests/batch/test_share_budget.py checks it.

    python bench/share_page.py [--mb 300] [--max-mb 20] [--output-kb 1024]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import encode_event

MB = 1024 * 1024


def write_log(path: Path, size: int, output_kb: int = 1024) -> int:
    seq = 0

    def line(event: ev.Event) -> bytes:
        nonlocal seq
        seq += 1
        event.seq, event.ts = seq, 1_700_000_000.0 + seq
        return encode_event(event)

    sandbox = ev.SandboxInfo(kind="local", isolation="bwrap", network=False, workdir="/w",
                             workspace="/w")  # fmt: skip
    started = ev.RunStarted(run_id="big", task="answer", task_title="A task", model="m",
                            limits=ev.Limits(time_limit_s=3600, max_steps=10_000),
                            sandbox=sandbox)  # fmt: skip
    output = ("epoch 1/1 loss=0.25 " * (52 * output_kb + 1))[: output_kb * 1024 - 200]
    written = 0
    with open(path, "wb") as f:
        f.write(data := line(started))
        written += len(data)
        step = 0
        while written < size:
            step += 1
            events: list[ev.Event] = [ev.StepStarted(agent="worker", step=step, turn=step, t=step)]
            events += [ev.TextDelta(agent="worker", turn=step, text="I will ", t=step)] * 200
            events.append(ev.ToolCall(call_id=f"c{step}", agent="worker", tool="bash", t=step,
                                      arguments={"command": "python train.py"}))  # fmt: skip
            events += [ev.ToolOutput(call_id=f"c{step}", text=output[:65536], t=step)] * 4
            events.append(ev.ToolResult(call_id=f"c{step}", tool="bash", agent="worker",
                                        ok=True, output=output, t=step))  # fmt: skip
            events.append(ev.Metrics(source="job:j1", job="j1", t=step, points=[
                ev.MetricPoint(name="loss", value=1 / (step * 400 + k), step=step * 400 + k,
                               wall=float(step)) for k in range(400)]))  # fmt: skip
            for event in events:
                f.write(data := line(event.model_copy()))
                written += len(data)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description="mlra share on a large synthetic log")
    parser.add_argument("--mb", type=int, default=300, help="the log's size (default 300)")
    parser.add_argument("--max-mb", type=float, default=20.0, help="the page's budget")
    parser.add_argument(
        "--output-kb", type=int, default=1024, help="each command's output (default 1024)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlra-share-bench-") as tmp:
        run_dir = Path(tmp) / "big"
        run_dir.mkdir()
        size = write_log(run_dir / "events.jsonl", args.mb * MB, args.output_kb)
        out = Path(tmp) / "big.html"
        load = os.getloadavg()[0]
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "mlra", "share", str(run_dir), "-o", str(out),
             "--max-mb", str(args.max_mb)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        took = time.monotonic() - began
        if done.returncode != 0:
            sys.exit(done.stderr)
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        page = out.stat().st_size
        print(
            f"log {size / MB:.0f} MB -> page {page / MB:.2f} MB (budget {args.max_mb:g} MB) in "
            f"{took:.1f} s, peak memory {peak_mb:.0f} MB; load {load:.1f} "
            f"({'within' if page <= args.max_mb * MB else 'OVER'} the budget)"
        )


if __name__ == "__main__":
    main()
