"""Build the classify-finetune task's files: the pretrained base model and the data.

Not a starter file (it writes the hidden test set too). The outputs are
committed; this script is how they were made, deterministically (seeded RNGs,
2 threads), so anyone can check and remake them:

    python tasks/classify-finetune/build_data.py      # about a minute on 2 cores

What is written:
- starter/base_model/: a small BERT (hidden 64, 2 layers, 2 heads, FFN 256,
  168-word vocabulary, word-level tokenizer) pretrained with masked-LM for 1500
  steps on 20,000 unlabelled generated reviews (see reviews.py). Its masked-LM
  head is saved too; the encoder is what the task fine-tunes.
- starter/data/train.jsonl (1,000) and valid.jsonl (500): labelled reviews
  {"text", "label"} with label "negative" or "positive".
- hidden/test.jsonl (2,000): labelled reviews no split shares a sentence with.
- hidden/validation.jsonl (1,000): the `validate` tool's split (its own seed), sharing
  no sentence with the files above. `python build_data.py --validation` writes it
  alone (the grammar only: the splits above are drawn again, not trained on).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import reviews  # noqa: E402

BASE = {"hidden": 64, "layers": 2, "heads": 2, "ffn": 256}


def build_base(out: Path) -> None:
    docs = list(reviews.documents(random.Random(0), 20_000))
    model, tok = reviews.pretrain_mlm(docs, **BASE, steps=1500)
    model.save_pretrained(out)
    tok.save_pretrained(out)


def splits() -> dict[str, list[dict]]:
    return reviews.unique_split(random.Random(1), {"train": 1000, "valid": 500, "test": 2000})


def build_validation(drawn: dict[str, list[dict]]) -> None:
    """The validation split: a seed of its own, no sentence of any split above."""
    seen = {r["text"] for rows in drawn.values() for r in rows}
    (rows,) = reviews.unique_split(random.Random(11), {"validation": 1000}, exclude=seen).values()
    reviews.write_jsonl(
        HERE / "hidden" / "validation.jsonl",
        [{"text": r["text"], "label": r["sentiment"]} for r in rows],
    )


def main() -> None:
    if sys.argv[1:] == ["--validation"]:
        build_validation(splits())
        return
    build_base(HERE / "starter" / "base_model")
    drawn = splits()
    build_validation(drawn)
    for name, rows in drawn.items():
        folder = HERE / ("hidden" if name == "test" else "starter/data")
        reviews.write_jsonl(
            folder / f"{name}.jsonl", [{"text": r["text"], "label": r["sentiment"]} for r in rows]
        )


if __name__ == "__main__":
    main()
