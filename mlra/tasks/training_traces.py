"""What training leaves in a model folder, for a challenge that allows none.

Edge LLMs' compression track says "compression only, no training is allowed" (and
no data is given). Whether weights were trained cannot be read from them without
the original model's, but a folder saved from a training run often says so itself:
the Hugging Face Trainer writes its arguments and state beside the model, PEFT its
adapter, and the Trainer's model card has its own headings. Deleting them hides the
training, so a check on them catches only what the files still say; the rule stays
trusted, partly checked. Read like the rest of a submission: walked without
following links, every read bounded.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from mlra.tools.sandbox import trees

TRAINING_FILES = (
    "training_args.bin",
    "trainer_state.json",
    "optimizer.pt",
    "optimizer.bin",
    "scheduler.pt",
    "rng_state*.pth",
    "adapter_config.json",
    "adapter_model.*",
)
"""What the Trainer (and PEFT) write beside a model trained with them."""
TRAINED_CARD_HEADINGS = ("Training hyperparameters", "Training procedure")
"""Headings of the model card (README.md) the Trainer writes."""
MAX_CARD_BYTES = 1024 * 1024
MAX_ENTRIES = 100_000


def training_traces(model_dir: Path) -> list[str]:
    """The files in `model_dir` that training left (relative paths; a Trainer model
    card named with the heading that tells it)."""
    try:
        root = os.open(model_dir, trees.DIR_FLAGS)
    except OSError:
        return []
    try:
        found = sorted(
            e.rel
            for e in trees.walk(root, max_entries=MAX_ENTRIES, stats=trees.WalkStats())
            if not e.is_dir
            and any(fnmatch.fnmatchcase(e.rel.rsplit("/", 1)[-1], p) for p in TRAINING_FILES)
        )
    finally:
        os.close(root)
    try:
        fd = os.open(model_dir / "README.md", os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return found
    try:
        card = trees.read_bounded(fd, MAX_CARD_BYTES).decode("utf-8", "replace")
    except (OSError, trees.TooLarge):
        card = ""
    finally:
        os.close(fd)
    headings = {line.strip("# ").strip() for line in card.splitlines() if line.startswith("#")}
    marks = [h for h in TRAINED_CARD_HEADINGS if h in headings]
    if marks:
        found.append(f"README.md, a Trainer model card ({marks[0]!r})")
    return found
