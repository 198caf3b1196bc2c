"""Each of the seven ML Research Benchmark evaluators end to end on a stand-in made on
the spot, as the slow tests grade them (tests/tasks/standins.py): the real task folder
copied, its lm-eval tasks resolved to local YAML tasks of the same names with data
written here, a tiny model built from a config with a tokenizer trained here, graded
through mlra's grading path (a fresh confined process) on the GPU. Recorded: the
score, the figures the task's rules check (peak memory while running, throughput
against the reference, parameters) and the device it was graded on.

On the GPU edge-llm-compression keeps the task's own settings: the reference is Phi-2
built from its config in FP16, 2000-token passes, 20 repeats, the 12 GB peak-memory rule;
on a CPU dry run the small reference of the slow test stands in for it."""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path
from typing import Any

from gpu_checks.core import Context, standins
from gpu_checks.grading import grade_folder

LEAN_ROWS = [
    {"name": "algebra_p1", "informal_statement": "s", "informal_proof": "p", "formal_proof": ""},
    {"name": "t2", "informal_statement": "s", "informal_proof": "p", "formal_proof": "theorem t2 : 2 = 2 := rfl"},
]  # fmt: skip


def parameters(folder: Path) -> int:
    """The parameters in the submission's safetensors files, read from their headers."""
    total = 0
    for path in folder.glob("*.safetensors"):
        with open(path, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        for name, entry in header.items():
            if name != "__metadata__":
                n = 1
                for d in entry["shape"]:
                    n *= d
                total += n
    return total


def stand_in(ctx: Context, name: str) -> tuple[Path, Path]:
    """(the task folder, the model) for `name`."""
    s = standins()
    root = ctx.work
    long = {"max_position_embeddings": 2048} if ctx.cuda else {}
    if name == "math-autoformalization":
        lean, project = s.lean_toolchain(root)
        os.environ["PATH"] = f"{lean.parent}{os.pathsep}{os.environ['PATH']}"
        os.environ["LEAN_PROJECT"] = str(project)
        rows = [dict(r) for r in LEAN_ROWS]
        rows[0]["formal_proof"] = s.REFERENCE
        return s.graded_math_copy(root, rows), s.llama(root / "model")
    folder = s.standin_copy(name, root, evaluator_lines='include = "standin"\n')
    standin = folder / "standin"
    if name in ("minipile", "edge-llm-training"):
        s.superglue_standin(standin)
    elif name == "babylm":
        s.group_standin(
            standin, "blimp", {"blimp_standin_a": 4, "blimp_standin_b": 8}, weight_by_size=False
        )
    else:  # the MMLU tasks
        s.group_standin(
            standin,
            "mmlu",
            {"mmlu_standin_algebra": 4, "mmlu_standin_history": 10},
            weight_by_size=True,
        )
    if name == "edge-llm-compression":
        if not ctx.cuda:
            small_reference(folder, s.TINY_REFERENCE)
        return folder, s.tiny_phi(root / "model", vocab_size=51200, **long)
    return folder, s.llama(root / "model", **long)


def small_reference(folder: Path, reference: dict[str, Any]) -> None:
    """The slow test's settings for a CPU: a small Phi in FP32, short passes."""
    toml = folder / "task.toml"
    text = toml.read_text()
    start = text.index("reference = {")
    end = text.index("\n", start)
    tiny = ", ".join(
        f"{k} = {v!r}" if isinstance(v, int) else f'{k} = "{v}"' for k, v in reference.items()
    )
    text = text[:start] + "reference = { " + tiny + " }" + text[end:]
    for old, new in (
        ("sequence_length = 2000", "sequence_length = 64"),
        ("repeats = 20", "repeats = 3"),
        ('reference_dtype = "float16"', 'reference_dtype = "float32"'),
    ):
        text = text.replace(old, new)
    toml.write_text(text)


RULE_FIGURES = ("memory/", "edge/", "lean", "problems")


async def check_evaluator(ctx: Context) -> None:
    name = ctx.arg
    folder, model = stand_in(ctx, name)
    f = ctx.figures
    f["parameters"] = parameters(model)
    began = time.monotonic()
    finished, details = await grade_folder(folder, model, ctx.work / "run")
    f["grading_seconds"] = round(time.monotonic() - began, 1)
    f["ok"] = finished.ok
    f["score"] = finished.score
    f["metric"] = finished.metric
    f["normalized"] = finished.normalized
    f["error"] = finished.error
    f["violations"] = finished.violations
    f["device"] = details.get("device")
    f["evaluator_seconds"] = details.get("seconds")
    f["isolation"] = finished.isolation
    f["rule_figures"] = {k: v for k, v in finished.metrics.items() if k.startswith(RULE_FIGURES)}
    # Documents whose top choices tied, scored as chance (tasks/evaluators/choice_ties.py):
    # a GPU's rounding can make or break a tie the CPU's grading had.
    f["tied_documents"] = finished.metrics.get("tied_documents", 0.0)
    if finished.rules is not None:
        f["rules"] = {"checked": finished.rules.checked, "trusted": finished.rules.trusted}
    ctx.expect(
        finished.ok, f"{name}: not graded: {finished.error} {finished.violations or ''}".strip()
    )
    ctx.expect(finished.score is not None, f"{name}: no score")
    if ctx.cuda and name != "math-autoformalization":
        ctx.expect(
            details.get("device") == "cuda", f"{name}: graded on {details.get('device')}, not cuda"
        )
    m = finished.metrics
    if name == "edge-llm-training":
        ctx.expect(
            0 < m.get("memory/peak_gb", 0) < 1,
            f"peak memory while running: {m.get('memory/peak_gb')} GB",
        )
    if name == "edge-llm-compression":
        ctx.expect(m.get("edge/throughput", 0) > 0, "no throughput measured")
        if ctx.cuda:
            peak = m.get("edge/peak_memory_gb")
            ref = m.get("edge/reference_peak_memory_gb")
            ctx.expect(
                peak is not None and peak < 12, f"the submission's peak CUDA memory: {peak} GB"
            )
            ctx.expect(ref is not None and 5 < ref < 12, f"Phi-2 FP16's peak CUDA memory: {ref} GB")
