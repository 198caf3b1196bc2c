"""A recorded run for the console's snapshot tests: fixed events (fixed clock
readings, resource figures and texts) and a workspace with fixed times, so the
screen is the same on every machine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from mlra import events as ev

Stage = Literal["running", "approval", "finished", "retrying"]
EPOCH = 1_790_000_000.0  # a fixed wall-clock time for the workspace's files


class _Recorder:
    def __init__(self) -> None:
        self.events: list[ev.Event] = []

    def add(self, t: float, event: ev.Event) -> None:
        event.seq = len(self.events) + 1
        event.ts = EPOCH + t
        event.t = t
        self.events.append(event)


def _sample(t: float, cpu: float) -> ev.ResourceSample:
    return ev.ResourceSample(
        cpu_percent=cpu,
        ram_used_mb=6_200,
        ram_total_mb=24_000,
        disk_workspace_mb=3.4,
        run_cpu_percent=cpu * 1.9,
        run_mem_mb=1_480,
        run_processes=3,
    )


def recorded_run(stage: Stage) -> list[ev.Event]:
    r = _Recorder()
    r.add(
        0,
        ev.RunStarted(
            run_id="20261123-120000-tiny-lm-abcd",
            task="tiny-lm",
            task_title="Pretrain a tiny language model from scratch on CPU",
            model="anthropic/claude-sonnet-4-6",
            limits=ev.Limits(time_limit_s=1200, max_steps=60, max_cost_usd=5.0),
            sandbox=ev.SandboxInfo(
                kind="local",
                isolation="bwrap",
                network=False,
                workdir="/workspace",
                workspace="/runs/x/workspace",
            ),
            context_window=200_000,
        ),
    )
    steps = [
        ev.PlanStep(id="1", title="Read the starter files and data", status="done"),
        ev.PlanStep(id="2", title="Run the baseline and measure it", status="in_progress"),
        ev.PlanStep(id="3", title="Train a larger model within the time limit"),
        ev.PlanStep(id="4", title="Save, check and submit"),
    ]
    r.add(
        2,
        ev.SupervisorMessage(
            text="Plan: understand the baseline, then scale the model within the CPU budget."
        ),
    )
    r.add(3, ev.PlanUpdated(steps=steps, reason="first plan"))
    r.add(
        4,
        ev.SubtaskStarted(
            subtask=2,
            step_id="2",
            instructions="Run train.py with its defaults and report the validation loss.",
        ),
    )
    for i, cpu in enumerate([12, 35, 88, 97, 99, 98, 96, 99]):
        r.add(5 + i * 10, _sample(5 + i * 10, cpu))
    r.add(6, ev.StepStarted(agent="worker", step=7, turn=7))
    r.add(
        9,
        ev.WorkerThought(
            text="The baseline trains a 2-layer model for 300 steps. I will run it as it is first.",
            turn=7,
            step=7,
        ),
    )
    r.add(
        10,
        ev.ToolCall(
            call_id="call_0007",
            agent="worker",
            tool="bash",
            arguments={"command": "python train.py --out submission"},
            turn=7,
            step=7,
        ),
    )
    lines = "".join(f"step {s:4d}  loss {6.5 - s / 80:.3f}\n" for s in range(0, 301, 20))
    r.add(40, ev.ToolOutput(call_id="call_0007", text="tokenizer: 2048 tokens\n" + lines))
    r.add(
        71,
        ev.ToolResult(
            call_id="call_0007",
            tool="bash",
            agent="worker",
            ok=True,
            output=lines + "[exit code 0, 61 s]",
            exit_code=0,
            duration_s=61.2,
        ),
    )
    r.add(
        72,
        ev.ModelCall(
            agent="worker",
            model="anthropic/claude-sonnet-4-6",
            input_tokens=18_400,
            output_tokens=620,
            cache_read_tokens=14_100,
            cost_usd=0.064,
        ),
    )
    r.add(
        74,
        ev.WorkerThought(
            text="Validation loss 2.79. Now I will try a 4-layer model with a longer context.",
            turn=8,
            step=8,
        ),
    )
    r.add(
        75,
        ev.ToolCall(
            call_id="call_0008",
            agent="worker",
            tool="write_file",
            arguments={
                "path": "train_big.sh",
                "content": "python train.py --layers 4 --d-model 256 --steps 1400 --out submission\n",
            },
            turn=8,
            step=8,
        ),
    )
    r.add(
        75,
        ev.ToolResult(
            call_id="call_0008",
            tool="write_file",
            agent="worker",
            ok=True,
            output="Created train_big.sh (71 bytes, 1 line).",
            duration_s=0.01,
        ),
    )
    r.add(
        76,
        ev.ToolCall(
            call_id="call_0009",
            agent="worker",
            tool="bash",
            arguments={"command": "rm -rf submission && bash train_big.sh"},
            turn=9,
            step=9,
        ),
    )
    if stage == "retrying":
        r.add(
            77,
            ev.ToolResult(
                call_id="call_0009",
                tool="bash",
                agent="worker",
                ok=False,
                output="[exit code 1, 1 s]",
                exit_code=1,
                duration_s=1.0,
            ),
        )
        r.add(78, ev.StepStarted(agent="worker", step=10, turn=10))
        r.add(81, ev.ModelRetry(agent="worker", model="m", attempt=1, max_retries=4, status=429))
        r.add(84, ev.ModelRetry(agent="worker", model="m", attempt=2, max_retries=4, status=429))
        r.add(
            90,
            ev.ResourceSample(
                cpu_percent=3, ram_used_mb=6_000, ram_total_mb=24_000, disk_workspace_mb=3.4
            ),
        )
        return r.events
    if stage == "running":
        r.add(
            80,
            ev.ToolOutput(
                call_id="call_0009",
                text="tokenizer: 4096 tokens\nstep    0  loss 8.301\nstep   50  loss 6.912\n",
            ),
        )
        return r.events
    r.add(
        76,
        ev.ApprovalRequested(
            call_id="call_0009",
            tool="bash",
            arguments={"command": "rm -rf submission && bash train_big.sh"},
            reason="bash matching 'rm -rf'",
        ),
    )
    r.add(78, ev.Control(action="pause"))
    if stage == "approval":
        return r.events
    r.add(85, ev.Control(action="resume"))
    r.add(90, ev.Control(action="approve", call_id="call_0009"))
    r.add(600, ev.ToolOutput(call_id="call_0009", text="step 1400  loss 2.41\n"))
    r.add(
        610,
        ev.ToolResult(
            call_id="call_0009",
            tool="bash",
            agent="worker",
            ok=True,
            output="step 1400  loss 2.41\n[exit code 0, 520 s]",
            exit_code=0,
            duration_s=520.0,
        ),
    )
    r.add(
        611,
        ev.SubtaskFinished(
            subtask=2,
            step_id="2",
            report="Trained a 4-layer model, validation loss 2.41, saved in submission/.",
            worker_steps=9,
        ),
    )
    r.add(
        612,
        ev.PlanUpdated(
            steps=[s.model_copy(update={"status": "done"}) for s in steps], reason="all done"
        ),
    )
    r.add(
        613,
        ev.ToolCall(
            call_id="call_0010", agent="supervisor", tool="submit", arguments={"path": "submission"}
        ),
    )
    r.add(
        613,
        ev.ToolResult(
            call_id="call_0010",
            tool="submit",
            agent="supervisor",
            ok=True,
            output="Submitted submission.",
            data={"path": "submission"},
        ),
    )
    r.add(613, ev.Submission(path="submission", note="4-layer model", by="agent"))
    r.add(613, ev.EvaluationStarted(evaluator="lm-eval", artifact="submission"))
    r.add(
        613,
        ev.EvaluationFinished(
            ok=True,
            metric="minimal_pair_accuracy",
            score=0.812,
            baseline=0.767,
            top=0.85,
            normalized=0.542,
            success=True,
            metrics={"tiny_lm_pairs/acc": 0.812, "tiny_lm_heldout/word_perplexity": 231.4},
        ),
    )
    r.add(613, ev.RunFinished(status="finished", reason="submitted", message="the agent submitted"))
    return r.events


def recorded_workspace(root: Path) -> Path:
    """The workspace of the recorded run, with fixed modification times."""
    files = {
        "README.md": "# tiny-lm\n\nTrain a small causal LM on data/train.txt.\n",
        "train.py": "import argparse\n\n\ndef main() -> None:\n    parser = argparse.ArgumentParser()\n    parser.add_argument('--out', default='submission')\n    print(parser.parse_args())\n\n\nif __name__ == '__main__':\n    main()\n",
        "train_big.sh": "python train.py --layers 4 --d-model 256 --steps 1400 --out submission\n",
        "data/train.txt": "It is a truth universally acknowledged...\n" * 40,
        "data/valid.txt": "No one who had ever seen Catherine Morland...\n" * 10,
        "submission/config.json": '{"model_type": "llama", "num_hidden_layers": 4}\n',
    }
    for i, (name, text) in enumerate(sorted(files.items())):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (EPOCH + 60 * i, EPOCH + 60 * i))
    return root
