"""The Edge LLMs Challenge's compression score: accuracy and throughput, memory a limit.

The NeurIPS 2024 Edge LLMs Challenge ranked compressed models on each accuracy task
and on throughput, the throughput rank counting twice, and refused a model that
needed more than 12 GB while it ran. A benchmark that keeps only the accuracy task
(MMLU) and checks 12 GB on the weights makes the uncompressed model the best
submission: Phi-2 fits in 5.6 GB. So the score puts back what the track rewarded.

One submission has no rank, so each rank becomes a standing against the uncompressed
model, measured on the same device in the same process:

- skill = (accuracy - chance) / (1 - chance): what the model knows beyond guessing,
  so that a model pruned to nothing, fast and at chance, scores 0;
- throughput: the starting kit's protocol (EvaluateThroughputAndMemory.py: batch 1,
  a forward pass over a 2000-token input, repeated; throughput = passes per second),
  on the submission and on the reference architecture built from its config with
  random weights (speed does not depend on the weights' values, so nothing is
  downloaded); speed-up s = submission / reference, and T = 1 - 1/s, the fraction of
  the reference's time saved (0 for the reference itself, 0.5 at twice its speed);
- score = skill * (w_acc + w_tp * T) / (w_acc + w_tp), w_tp = 2 w_acc as in the
  challenge: between a third of the skill (no faster than the reference) and all
  of it (no time at all). Slower than the reference lowers it, never below 0.
- peak memory during that forward pass (`torch.cuda.max_memory_allocated`, as the
  starting kit reads it) must stay under the limit, where a GPU measures it. Each
  model is measured alone in a fresh process (tasks/evaluators/model_memory.py), so
  the figure is the model's own, never lm-eval's copy of it as well.

mlra's score is a deliberate difference from the benchmark (MLRB scores MMLU
accuracy alone, which unmodified Phi-2 maximizes): the challenge's own metric,
`mmlu/acc`, is reported beside it in every result.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class EfficiencySettings(BaseModel):
    """`[evaluator.settings.efficiency]` of an lm-eval task."""

    model_config = ConfigDict(extra="forbid")

    reference: dict[str, Any]
    """The uncompressed model's config (transformers keys, `model_type` included)."""
    reference_dtype: str = "float16"
    chance: float = Field(default=0.25, ge=0, lt=1)
    accuracy_weight: float = Field(default=1.0, gt=0)
    throughput_weight: float = Field(default=2.0, ge=0)
    sequence_length: int = Field(default=2000, gt=0)
    batch_size: int = Field(default=1, gt=0)
    repeats: int = Field(default=20, gt=0)
    warmup: int = Field(default=3, ge=0)
    max_peak_memory_gb: float | None = None


@dataclass
class Measurement:
    throughput: float
    """Forward passes of `batch_size` sequences per second (median time per pass)."""
    peak_bytes: int | None
    """Peak allocated GPU memory during the passes; None on a CPU."""


def edge_score(
    accuracy: float, speedup: float, settings: EfficiencySettings
) -> tuple[float, dict[str, float]]:
    """The score and its parts from an accuracy and a speed-up over the reference."""
    skill = max(0.0, (accuracy - settings.chance) / (1 - settings.chance))
    w_acc, w_tp = settings.accuracy_weight, settings.throughput_weight
    lowest = -w_acc / w_tp if w_tp else 0.0  # where the factor reaches 0
    saved = min(1.0, max(1 - 1 / speedup if speedup > 0 else lowest, lowest))
    factor = (w_acc + w_tp * saved) / (w_acc + w_tp)
    return skill * factor, {
        "edge/skill": skill,
        "edge/speedup": speedup,
        "edge/time_saved": saved,
        "edge/efficiency_factor": factor,
    }


def memory_violation(peak_bytes: int, settings: EfficiencySettings) -> str | None:
    """The rule a model breaks when it needed more than the limit while it ran."""
    limit = settings.max_peak_memory_gb
    if limit is None or peak_bytes <= limit * 1e9:
        return None
    return (
        f"max_peak_memory_gb: the model needed {peak_bytes / 1e9:.3g} GB while it ran "
        f"(a {settings.sequence_length}-token forward pass), more than the {limit:g} GB allowed"
    )


def measure(
    model: Any, *, vocab_size: int, settings: EfficiencySettings, device: str
) -> Measurement:
    """The starting kit's measurement: batch 1 (by default), fixed tokens, no grad."""
    import torch

    n = settings.sequence_length
    ids = (torch.arange(settings.batch_size * n) * 7919 % max(vocab_size - 1, 1)).view(
        settings.batch_size, n
    )
    inputs = {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times: list[float] = []
    with torch.no_grad():
        for i in range(settings.warmup + settings.repeats):
            if cuda:
                torch.cuda.synchronize()
            started = time.perf_counter()
            out = model(**inputs)
            if cuda:
                torch.cuda.synchronize()
            if i >= settings.warmup:
                times.append(time.perf_counter() - started)
            del out
    peak = int(torch.cuda.max_memory_allocated()) if cuda else None
    return Measurement(settings.batch_size / statistics.median(times), peak)


def _free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def measure_submission(artifact: Path, settings: EfficiencySettings, device: str) -> Measurement:
    """The submission alone, in a fresh process (tasks/evaluators/model_memory.py): its
    peak memory is then this model's, not lm-eval's copy of it as well."""
    from mlra.tasks.evaluators.model_memory import measure_in_fresh_process

    got = measure_in_fresh_process(
        device=device,
        artifact=artifact,
        sequence_length=settings.sequence_length,
        batch_size=settings.batch_size,
        warmup=settings.warmup,
        repeats=settings.repeats,
    )
    return Measurement(got.throughput, got.peak_cuda_bytes)


def measure_reference(settings: EfficiencySettings, device: str) -> Measurement:
    """The uncompressed architecture, random weights, in a fresh process of its own too,
    so that both are measured alike."""
    from mlra.tasks.evaluators.model_memory import measure_in_fresh_process

    got = measure_in_fresh_process(
        device=device,
        reference=dict(settings.reference),
        dtype=settings.reference_dtype,
        sequence_length=settings.sequence_length,
        batch_size=settings.batch_size,
        warmup=settings.warmup,
        repeats=settings.repeats,
    )
    return Measurement(got.throughput, got.peak_cuda_bytes)


def score_efficiency(
    artifact: Path, accuracy: float, raw: dict[str, Any], device: str
) -> tuple[float, dict[str, float], list[str]]:
    """(score, metrics, violations) of a submission whose accuracy is `accuracy`."""
    settings = EfficiencySettings.model_validate(raw)
    _free(device)
    submission = measure_submission(artifact, settings, device)
    reference = measure_reference(settings, device)
    score, metrics = edge_score(accuracy, submission.throughput / reference.throughput, settings)
    metrics |= {
        "edge/throughput": submission.throughput,
        "edge/reference_throughput": reference.throughput,
    }
    violations: list[str] = []
    if submission.peak_bytes is not None and reference.peak_bytes is not None:
        metrics["edge/peak_memory_gb"] = submission.peak_bytes / 1e9
        metrics["edge/reference_peak_memory_gb"] = reference.peak_bytes / 1e9
        broken = memory_violation(submission.peak_bytes, settings)
        if broken is not None:
            violations.append(broken)
    return score, metrics, violations
