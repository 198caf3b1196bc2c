"""Grading on the GPU: lm-eval on a tiny model made here, through mlra's grading path
(tasks/grading.grade: a fresh confined process), once on the GPU and once on the CPU,
which must give the same score; and a short `mlra run` of an offline task through the
CLI with the GPUs given, graded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpu_checks.core import Context, standins


async def grade_folder(folder: Path, model: Path, work: Path) -> tuple[Any, dict[str, Any]]:
    """(the EvaluationFinished, the evaluator's details: device, versions, seconds) of
    the task folder's evaluator on a copy of `model` as the workspace's submission."""
    from mlra.tasks.grading import grade
    from mlra.tasks.spec import load_task

    workspace = work / "workspace"
    shutil.copytree(model, workspace / "submission")
    _, finished = await grade(load_task(folder), workspace, None, work / "eval")
    try:
        outcome = json.loads((work / "eval" / "evaluation.json").read_text())
    except (OSError, ValueError):
        outcome = {}
    return finished, dict(outcome.get("details") or {})


WORDS = "the cat sat on mat is it true yes no maybe theorem foo".split()


def varied_rows(n: int, seed: int) -> str:
    """Multiple-choice rows whose texts and choices differ, so a random model's picks
    follow its logits (the stand-ins' same two choices everywhere give any model 0.5):
    a GPU's rounding that turned a pick round would show in the score."""
    import random

    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12)))
        choices = rng.sample(WORDS, 4)
        rows.append({"text": text, "choices": choices, "label": rng.randrange(4)})
    return "".join(json.dumps(r) + "\n" for r in rows)


def with_device(folder: Path, device: str) -> Path:
    toml = folder / "task.toml"
    text = toml.read_text()
    assert 'device = "auto"' in text
    toml.write_text(text.replace('device = "auto"', f'device = "{device}"'))
    return folder


async def check_lm_eval(ctx: Context) -> None:
    s = standins()
    model = s.llama(ctx.work / "tiny")
    got: dict[str, Any] = {}
    for device in (ctx.device, "cpu"):
        label = "gpu" if device == "cuda" else f"{device}_{len(got) + 1}"
        folder = s.standin_copy(
            "llm-merging", ctx.work / label, evaluator_lines='include = "standin"\n'
        )
        sizes = {"mmlu_standin_algebra": 24, "mmlu_standin_history": 40}
        s.group_standin(folder / "standin", "mmlu", sizes, weight_by_size=True)
        for i, (name, n) in enumerate(sizes.items()):
            (folder / "standin" / f"{name}.jsonl").write_text(varied_rows(n, seed=i))
        finished, details = await grade_folder(
            with_device(folder, device), model, ctx.work / label / "run"
        )
        got[label] = finished
        ctx.figures[label] = {
            "ok": finished.ok, "score": finished.score, "error": finished.error,
            "device": details.get("device"), "seconds": details.get("seconds"),
            "metrics": finished.metrics,
        }  # fmt: skip
        ctx.expect(finished.ok, f"grading on {device} failed: {finished.error}")
        ctx.expect(
            details.get("device") == device, f"graded on {details.get('device')}, asked {device}"
        )
    first, second = got.values()
    if first.ok and second.ok:
        diff = {
            k: abs(first.metrics[k] - second.metrics.get(k, float("nan")))
            for k in first.metrics
            if k.endswith("/acc")
        }
        ctx.figures["largest_metric_difference"] = max(diff.values(), default=0.0)
        ctx.expect(
            first.score == second.score and all(d == 0 for d in diff.values()),
            f"the scores differ: {first.score} against {second.score} ({diff})",
        )


def check_mlra_run(ctx: Context) -> None:
    """`mlra run tiny-lm --model baseline --no-tui --gpus all`: the recipe trains on the
    CPU (the task says CPU only) and lm-eval grades on the GPU the run was given."""
    from mlra import events as ev
    from mlra.agent.record.eventlog import read_events

    runs = ctx.work / "runs"
    argv = [
        sys.executable, "-m", "mlra", "run", "tiny-lm", "--model", "baseline", "--no-tui",
        "--gpus", "all" if ctx.cuda else "none", "--runs-dir", str(runs), "--run-id", "gpu-check",
    ]  # fmt: skip
    ctx.figures["command"] = " ".join(["mlra", *argv[3:]])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    began = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, check=False)
    ctx.figures["wall_s"] = round(time.monotonic() - began, 1)
    ctx.figures["exit"] = done.returncode
    ctx.expect(
        done.returncode == 0,
        f"mlra run exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}",
    )
    log = runs / "gpu-check" / "events.jsonl"
    if not log.exists():
        ctx.expect(False, f"no events.jsonl at {log}")
        return
    events = read_events(log)
    finished = [e for e in events if isinstance(e, ev.EvaluationFinished)]
    samples = [e for e in events if isinstance(e, ev.ResourceSample)]
    ctx.figures["resource_samples"] = len(samples)
    ctx.figures["gpus_in_samples"] = sorted({g.name for s in samples for g in s.gpus})
    if ctx.cuda:
        ctx.expect(any(s.gpus for s in samples), "no resource sample of the run shows a GPU")
    ctx.expect(bool(finished), "the run was not graded")
    for f in finished[-1:]:
        ctx.figures["score"] = f.score
        ctx.figures["ok"] = f.ok
        ctx.figures["error"] = f.error
        ctx.expect(f.ok and f.score is not None, f"grading failed: {f.error}")
    try:
        outcome = json.loads((runs / "gpu-check" / "evaluation" / "evaluation.json").read_text())
        details = outcome.get("details") or {}
        ctx.figures["graded_on"] = details.get("device")
        ctx.figures["lm_eval_s"] = details.get("seconds")
    except (OSError, ValueError):
        ctx.figures["graded_on"] = None
    if ctx.cuda:
        ctx.expect(
            ctx.figures["graded_on"] == "cuda", f"graded on {ctx.figures['graded_on']}, not cuda"
        )
