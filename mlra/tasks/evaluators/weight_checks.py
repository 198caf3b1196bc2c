"""What a submitted model's weights hold that leaves nothing to score, said in words: NaN or
infinite values (in the files, or in the log-likelihoods the model computes from finite
ones), tensors whose shapes disagree with the model's own config, a tokenizer with more
tokens than the model has embeddings.

A training run that diverged saves NaN weights, and such a model still gets a number
from a scorer that takes an arg-max: NaN log-likelihoods tie, and a tie goes to the
first choice, which is the right one in every BLiMP pair (lm-eval's `blimp` puts the
grammatical sentence first), so a NaN model scored 1.0 there; a NaN classifier predicts
its first label for every text. The number measures nothing, so such a model gets no
score and the reason says why. Masks and other buffers that hold -inf by design are the
ones the rules do not count as weights (`constraints.NOT_WEIGHTS`).

A checkpoint whose shapes disagree with its config fails to load with transformers'
"For details look at the above report!", a report its log level hides from the grader's
output; the tensors at fault are named here instead, from the files' headers.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlra.tasks.constraints import NOT_WEIGHTS, read_safetensors_header

MISMATCH_MARK = "ignore_mismatched_sizes"
"""In transformers' message for a checkpoint whose shapes differ from the model's."""
NAMED_AT_MOST = 3
LIKELIHOODS_METHOD = "_loglikelihood_tokens"
"""lm-eval's HFLM method every loglikelihood and rolling request goes through."""


def non_finite_weights(artifact: Path) -> str | None:
    """Why the model computes nothing to score, in words; None when every weight is finite.

    Tensors are read one at a time from the safetensors files (what a model loads), so
    the check holds at most one tensor in memory; pickled weights, which a task may
    allow, are not unpickled here (the model's loader reads them)."""
    import torch
    from safetensors import safe_open

    bad: list[str] = []
    checked = 0
    for file in sorted(artifact.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as weights:
                for name in weights.keys():
                    if any(part in name for part in NOT_WEIGHTS):
                        continue
                    tensor = weights.get_tensor(name)
                    if not tensor.is_floating_point():
                        continue
                    checked += 1
                    if not bool(torch.isfinite(tensor).all()):
                        bad.append(name)
        except Exception:
            continue  # a file that does not read: the model's loader says what is wrong
    if not bad:
        return None
    return (
        f"the model's weights hold NaN or infinite values ({len(bad)} of {checked} tensors, "
        f"e.g. {bad[0]}): it computes nothing to score (did its training diverge?)"
    )


def load_failure(exc: BaseException, artifact: Path, auto_class: Any) -> str:
    """transformers' reason a model did not load, with the tensors at fault named where
    its message points at a report the grader's output does not show."""
    text = " ".join(str(exc).split())
    if MISMATCH_MARK in text:
        shapes = shape_mismatches(artifact, auto_class)
        if shapes:
            more = len(shapes) - NAMED_AT_MOST
            return (
                "its weights do not fit the architecture its config.json describes: "
                + "; ".join(shapes[:NAMED_AT_MOST])
                + (f"; and {more} more" if more > 0 else "")
            )
    return f"{type(exc).__name__}: {text[:400]}"


def shape_mismatches(artifact: Path, auto_class: Any) -> list[str]:
    """Each tensor whose shape differs from the model the config builds, as "NAME: [3, 64]
    in the weights, [8, 64] by config.json" (the model built on the meta device: no memory)."""
    import torch
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(
            str(artifact), trust_remote_code=False, local_files_only=True
        )
        with torch.device("meta"):
            model = auto_class.from_config(config, trust_remote_code=False)
        expected = {name: list(t.shape) for name, t in model.state_dict().items()}
        found = [
            t for f in sorted(artifact.glob("*.safetensors")) for t in read_safetensors_header(f)
        ]
    except Exception:  # a config or a header that does not read: transformers' words stand
        return []
    return [
        f"{t.name}: {t.shape} in the weights, {expected[t.name]} by config.json"
        for t in found
        if t.name in expected and expected[t.name] != t.shape
    ]


def vocabulary_misfit(exc: BaseException, tokens: int, artifact: Path) -> str | None:
    """Why a model failed with torch's "index out of range in self" where its tokenizer
    has more tokens than the model has embeddings (another model's tokenizer saved beside
    it); None for any other failure. Said only on that failure: a tokenizer longer than
    the embeddings works as long as its extra tokens never occur."""
    if not isinstance(exc, IndexError):
        return None
    try:
        vocab = json.loads((artifact / "config.json").read_text(encoding="utf-8"))["vocab_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(vocab, int) or tokens <= vocab:
        return None
    return (
        f"the submitted tokenizer has {tokens} tokens, and the model {vocab} embeddings "
        "(config.json's vocab_size), so a token id past them failed: save the tokenizer "
        "the model was trained with"
    )


@dataclass
class LikelihoodWatch:
    """The log-likelihoods lm-eval's model computed in this process, and how many were not
    finite: finite weights can still overflow (float16 activations past 65504), and the
    arg-max over NaN ties scores them as the weights' NaN did."""

    requests: int = 0
    non_finite: int = 0

    def problem(self, dtype: str) -> str:
        return (
            f"the model's log-likelihoods are NaN or infinite for {self.non_finite} of the "
            f"{self.requests} requests lm-eval made (dtype {dtype}): it scores nothing there, "
            "where lm-eval's arg-max counts a tie of NaN as the first choice"
        )


@contextlib.contextmanager
def watch_likelihoods() -> Iterator[LikelihoodWatch]:
    """Count what lm-eval's Hugging Face model returns while the block runs: every
    loglikelihood and rolling request goes through LIKELIHOODS_METHOD."""
    from lm_eval.models.huggingface import HFLM

    watch = LikelihoodWatch()
    original = getattr(HFLM, LIKELIHOODS_METHOD)

    def counted(self: Any, requests: Any, *args: Any, **kwargs: Any) -> Any:
        results = original(self, requests, *args, **kwargs)
        for likelihood, _greedy in results:
            watch.requests += 1
            if not math.isfinite(float(likelihood)):
                watch.non_finite += 1
        return results

    setattr(HFLM, LIKELIHOODS_METHOD, counted)
    try:
        yield watch
    finally:
        setattr(HFLM, LIKELIHOODS_METHOD, original)
