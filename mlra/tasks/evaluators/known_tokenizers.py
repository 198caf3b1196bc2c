"""Known pretrained tokenizers, told apart from one trained on the task's data.

BabyLM's strict tracks ("train strictly on the dataset provided") count the
tokenizer as part of what is trained: a vocabulary learned from web-scale text
carries that text's statistics into a model meant to see 10M words. Whether a
vocabulary was learned from the corpus cannot be proven from the files, but a
known pretrained one can be recognized: each maps a fixed probe text to token ids
that a vocabulary learned from other data reproduces only by copying it. The
probe is encoded without special tokens, so a tokenizer that adds a BOS or
changes its pad token is still recognized; a vocabulary retrained on the corpus
with the same algorithm (`train_new_from_iterator`) is not, as it should not be.
"""

from __future__ import annotations

from typing import Any

PROBE = "Hello world"
KNOWN: dict[tuple[int, ...], str] = {
    (15496, 995): "GPT-2's (also GPT-J's, OPT's 50k byte-level BPE family)",
    (12092, 1533): "GPT-NeoX's (Pythia's)",
    (15043, 3186): "Llama 2's (Llama/Vicuna 32k SentencePiece)",
    (22557, 1526): "Mistral's (32k SentencePiece)",
    (9906, 1917): "Llama 3's (tiktoken cl100k-based)",
}
"""The ids of PROBE under each known pretrained vocabulary (without special tokens)."""


def pretrained_vocabulary(tokenizer: Any) -> str | None:
    """The name of the known pretrained vocabulary `tokenizer` uses, or None."""
    try:
        ids = tuple(int(i) for i in tokenizer(PROBE, add_special_tokens=False)["input_ids"])
    except Exception:  # a tokenizer that cannot encode the probe is judged elsewhere
        return None
    return KNOWN.get(ids)


def pretrained_tokenizer_violation(tokenizer: Any) -> str | None:
    """The broken rule where the submission's tokenizer is a known one; it begins with
    the check's name, so the task's challenge rule naming it is quoted with it."""
    known = pretrained_vocabulary(tokenizer)
    if known is None:
        return None
    return (
        f"pretrained_tokenizer: the submitted tokenizer is {known} pretrained vocabulary "
        f"(it encodes {PROBE!r} to that vocabulary's ids), not one trained on the data "
        "provided; train one on the corpus (e.g. train_new_from_iterator)"
    )
