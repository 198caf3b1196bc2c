"""A model's memory while it runs, measured in a process of its own.

The Edge LLMs Challenge's limits (1 GB for the training track, 12 GB for
compression) are on the device's memory while the model runs, not on the bytes of
its weights: activations, the KV cache of a long input and the buffers a layer
builds count too. Measured inside the grading process, the figure would also hold
lm-eval's own copy of the model (and whatever the allocator kept of it), which can
fail an honest FP16 Phi-2 against 12 GB. So the model is loaded alone in a fresh
Python process (`python -m mlra.tasks.evaluators.model_memory`), run over a fixed
input as the challenge's starting kit runs it (EvaluateThroughputAndMemory.py:
batch 1, a 2000-token forward pass, repeated, no gradients), and the process reports:

- on a GPU, `torch.cuda.max_memory_allocated` over the passes (the starting kit's
  figure): the weights, activations and caches of this model and nothing else;
- on a CPU, the peak resident memory of the process (VmHWM) less what it held
  before the model was loaded (Python, torch and transformers themselves): the
  model's own share of the process's DRAM.

No code of the submission runs (`trust_remote_code=False`, safetensors only); the
child gets the same confinement as the grading process it is started from.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MAX_OUTPUT_BYTES = 64 * 1024


@dataclass
class RunningMemory:
    """What one fresh process measured of one model."""

    device: str
    sequence_length: int
    """Tokens per forward pass (the setting, capped at the model's context length)."""
    throughput: float
    """Forward passes of `batch_size` sequences per second (median time per pass)."""
    peak_bytes: int
    """The model's peak while it ran: CUDA allocated on a GPU, else RSS above the
    process's footprint before the model was loaded."""
    peak_cuda_bytes: int | None
    peak_rss_bytes: int
    """Peak resident memory of the whole process (Python and libraries included)."""
    rss_before_model_bytes: int


class MeasurementFailed(Exception):
    pass


def _rss_now() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _peak_rss() -> int:
    """This process's peak resident memory: VmHWM, which belongs to the process's own
    address space (`ru_maxrss` is not: Linux carries it over from the parent through
    fork and exec, so it would count the grading process's memory)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _context_length(config: Any) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _measure(request: dict[str, Any]) -> RunningMemory:
    """In the child: load one model (a folder or a reference config), run it, report."""
    import torch
    import transformers

    device = str(request["device"])
    cuda = device.startswith("cuda")
    rss_before = _rss_now()  # Python, torch and transformers: not the model's
    if request.get("artifact"):
        model: Any = transformers.AutoModelForCausalLM.from_pretrained(
            str(request["artifact"]),
            torch_dtype="auto",
            use_safetensors=True,
            trust_remote_code=False,
            local_files_only=True,
            low_cpu_mem_usage=True,
        )
        model = model.to(device)
        config = model.config
    else:
        reference = dict(request["reference"])
        config = transformers.AutoConfig.for_model(str(reference.pop("model_type")), **reference)
        dtype = getattr(torch, str(request.get("dtype", "float16")))
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=dtype)
    model.eval()
    n = int(request["sequence_length"])
    context = _context_length(config)
    if context is not None:
        n = min(n, context)
    batch = int(request.get("batch_size", 1))
    vocab = int(config.vocab_size)
    ids = (torch.arange(batch * n) * 7919 % max(vocab - 1, 1)).view(batch, n).to(device)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times: list[float] = []
    warmup, repeats = int(request.get("warmup", 1)), int(request.get("repeats", 1))
    with torch.no_grad():
        for i in range(warmup + repeats):
            if cuda:
                torch.cuda.synchronize()
            started = time.perf_counter()
            out = model(**inputs)
            if cuda:
                torch.cuda.synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - started)
            del out
    peak_cuda = int(torch.cuda.max_memory_allocated()) if cuda else None
    peak_rss = _peak_rss()
    return RunningMemory(
        device=device,
        sequence_length=n,
        throughput=batch / statistics.median(times),
        peak_bytes=peak_cuda if peak_cuda is not None else max(0, peak_rss - rss_before),
        peak_cuda_bytes=peak_cuda,
        peak_rss_bytes=peak_rss,
        rss_before_model_bytes=rss_before,
    )


def measure_in_fresh_process(
    *,
    device: str,
    sequence_length: int,
    artifact: Path | None = None,
    reference: dict[str, Any] | None = None,
    dtype: str = "float16",
    batch_size: int = 1,
    warmup: int = 1,
    repeats: int = 1,
    timeout_s: float = 1800,
) -> RunningMemory:
    """Run one model (a submitted folder, or a reference architecture with random
    weights) in a child Python process and return what it measured."""
    if (artifact is None) == (reference is None):
        raise ValueError("measure either an artifact or a reference config")
    request = {
        "device": device,
        "sequence_length": sequence_length,
        "artifact": str(artifact) if artifact is not None else None,
        "reference": reference,
        "dtype": dtype,
        "batch_size": batch_size,
        "warmup": warmup,
        "repeats": repeats,
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mlra.tasks.evaluators.model_memory"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise MeasurementFailed(f"the measuring process ran past {timeout_s:.0f}s") from None
    last = (done.stdout or "").strip().splitlines()[-1:] or [""]
    try:
        answer = json.loads(last[0][:MAX_OUTPUT_BYTES])
    except ValueError:
        answer = None
    if done.returncode != 0 or not isinstance(answer, dict) or "error" in answer:
        why = (
            answer.get("error")
            if isinstance(answer, dict) and answer.get("error")
            else (" ".join((done.stderr or "").split()[-60:]) or f"exit {done.returncode}")
        )
        raise MeasurementFailed(str(why)[:600])
    return RunningMemory(**answer)


def running_memory_rule(
    artifact: Path, raw: dict[str, Any], device: str
) -> tuple[dict[str, float], str | None]:
    """(metrics, the broken rule or None) for `[evaluator.settings.running_memory]`:
    `max_gb`, `sequence_length` (default 2000, the starting kit's), `batch_size`
    (default 1). A broken rule begins `running_memory:`, the check's name, so the
    task's challenge rule that names it is quoted with it (tasks/challenge.py)."""
    limit = float(raw["max_gb"])
    got = measure_in_fresh_process(
        device=device,
        artifact=artifact,
        sequence_length=int(raw.get("sequence_length", 2000)),
        batch_size=int(raw.get("batch_size", 1)),
    )
    metrics = {
        "memory/peak_gb": got.peak_bytes / 1e9,
        "memory/process_peak_rss_gb": got.peak_rss_bytes / 1e9,
        "memory/sequence_length": float(got.sequence_length),
    }
    if got.peak_cuda_bytes is not None:
        metrics["memory/peak_cuda_gb"] = got.peak_cuda_bytes / 1e9
    if got.peak_bytes <= limit * 1e9:
        return metrics, None
    how = (
        "GPU memory allocated"
        if got.peak_cuda_bytes is not None
        else "resident memory above the process's own before the model was loaded"
    )
    return metrics, (
        f"running_memory: the model needed {got.peak_bytes / 1e9:.3g} GB while it "
        f"ran ({how}, a {got.sequence_length}-token forward pass at batch "
        f"{int(raw.get('batch_size', 1))}, the model alone in a fresh process), more than "
        f"the {limit:g} GB allowed"
    )


def main() -> int:
    request = json.loads(sys.stdin.read())
    try:
        result: dict[str, Any] = asdict(_measure(request))
    except Exception as exc:  # one line for the parent, whatever went wrong
        result = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"}
    sys.stdout.write("\n" + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    raise SystemExit(main())
