"""Build the compress-budget task's files: the teacher model to compress and the data.

Not a starter file (it writes the hidden test set too). The outputs are
committed; this script is how they were made, deterministically (seeded RNGs,
2 threads; a few minutes on 2 cores):

    python tasks/compress-budget/build_data.py

The reviews come from the grammar in ../classify-finetune/reviews.py. The label
is topic and sentiment together, eight classes such as "hotel/negative".

What is written:
- starter/teacher/: a BERT classifier (hidden 128, 3 layers, 4 heads, FFN 384,
  about 0.54M parameters): pretrained with masked-LM for 1,500 steps on 20,000
  unlabelled generated reviews, then fine-tuned with cross-entropy on 20,000
  labelled reviews that are not among the files below.
- starter/data/train.jsonl (2,000 labelled), unlabelled.txt (20,000 reviews,
  one a line, no labels: for distillation), valid.jsonl (500 labelled).
- hidden/test.jsonl (2,000 labelled): no split shares a sentence with another.
- hidden/validation.jsonl (1,000 labelled): the `validate` tool's split (its own seed),
  sharing no sentence with any split above, the teacher's training reviews included.
  `python build_data.py --validation` writes it alone (the splits are drawn again from
  the grammar; nothing is trained).
"""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "classify-finetune"))

import reviews  # noqa: E402

LABELS = [f"{t}/{s}" for t in reviews.TOPIC_NAMES for s in reviews.SENTIMENTS]
TEACHER = {"hidden": 128, "layers": 3, "heads": 4, "ffn": 384}


def label(row: dict) -> str:
    return f"{row['topic']}/{row['sentiment']}"


def draw() -> dict[str, list[dict]]:
    splits = reviews.unique_split(
        random.Random(2),
        {"teacher": 20_000, "train": 2000, "unlabelled": 20_000, "valid": 500, "test": 2000},
    )
    return {
        name: [{"text": r["text"], "label": label(r)} for r in split]
        for name, split in splits.items()
    }


def build_validation(rows: dict[str, list[dict]]) -> None:
    """The validation split: a seed of its own, no sentence of any split above."""
    seen = {r["text"] for split in rows.values() for r in split}
    (drawn,) = reviews.unique_split(random.Random(12), {"validation": 1000}, exclude=seen).values()
    reviews.write_jsonl(
        HERE / "hidden/validation.jsonl", [{"text": r["text"], "label": label(r)} for r in drawn]
    )


def main() -> None:
    from transformers import BertForSequenceClassification

    rows = draw()
    build_validation(rows)
    reviews.write_jsonl(HERE / "starter/data/train.jsonl", rows["train"])
    reviews.write_jsonl(HERE / "starter/data/valid.jsonl", rows["valid"])
    (HERE / "starter/data/unlabelled.txt").write_text(
        "".join(r["text"] + "\n" for r in rows["unlabelled"])
    )
    reviews.write_jsonl(HERE / "hidden/test.jsonl", rows["test"])

    docs = list(reviews.documents(random.Random(4), 20_000))
    mlm, tok = reviews.pretrain_mlm(docs, **TEACHER, steps=1500, lr=1e-3)
    mlm.save_pretrained(HERE / "build-cache/mlm")
    reviews.seed_everything(0)
    model = BertForSequenceClassification.from_pretrained(
        HERE / "build-cache/mlm", num_labels=len(LABELS), id2label=dict(enumerate(LABELS)),
        label2id={name: i for i, name in enumerate(LABELS)},
    )  # fmt: skip
    shutil.rmtree(HERE / "build-cache")
    reviews.finetune(
        model, tok, rows["teacher"], "label", LABELS, steps=2000, batch_size=32, lr=3e-4
    )
    print("teacher test accuracy", reviews.accuracy(model, tok, rows["test"], "label", LABELS))
    model.save_pretrained(HERE / "starter/teacher")
    tok.save_pretrained(HERE / "starter/teacher")


if __name__ == "__main__":
    if sys.argv[1:] == ["--validation"]:
        build_validation(draw())
    else:
        main()
