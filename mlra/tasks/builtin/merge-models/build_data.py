"""Build the merge-models task's files: the shared base, the two experts and the data.

Not a starter file (it writes the hidden test sets too). The outputs are
committed; this script is how they were made, deterministically (seeded RNGs,
2 threads; under a minute on 2 cores, after classify-finetune's build):

    python tasks/merge-models/build_data.py

The reviews come from the grammar in ../classify-finetune/reviews.py.

What is written:
- starter/models/base/: classify-finetune's pretrained base encoder (hidden 64,
  2 layers, masked-LM pretraining), with a pooler initialized once (seed 0), so
  both experts start from exactly these weights.
- starter/models/sentiment/: the base fine-tuned (all weights) to tell a
  review's sentiment; labels "sentiment:negative", "sentiment:positive".
- starter/models/topic/: the base fine-tuned to tell a review's topic; labels
  "topic:food", "topic:film", "topic:hotel", "topic:phone".
  Each expert's training data (4,000 reviews each) is not shipped.
- starter/data/valid_sentiment.jsonl, valid_topic.jsonl (300 each): labelled
  reviews for choosing merge settings.
- hidden/test_sentiment.jsonl, hidden/test_topic.jsonl (2,000 each).
- hidden/validation_sentiment.jsonl, hidden/validation_topic.jsonl (1,000 each): the
  `validate` tool's split (its own seed). `python build_data.py --validation` writes
  them alone (the splits are drawn again from the grammar; nothing is trained).
No split shares a sentence with another.
"""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "classify-finetune"))

import reviews  # noqa: E402

SOURCE_BASE = HERE.parent / "classify-finetune" / "starter" / "base_model"
MODELS = HERE / "starter" / "models"
SENTIMENT = [f"sentiment:{s}" for s in reviews.SENTIMENTS]
TOPIC = [f"topic:{t}" for t in reviews.TOPIC_NAMES]


def draw() -> dict[str, list[dict]]:
    return reviews.unique_split(
        random.Random(3),
        {
            "sentiment": 4000,
            "topic": 4000,
            "valid": 300,
            "valid2": 300,
            "test": 2000,
            "test2": 2000,
        },
    )


def build_validation(splits: dict[str, list[dict]]) -> None:
    """The validation splits: a seed of their own, no sentence of any split above."""
    seen = {r["text"] for split in splits.values() for r in split}
    drawn = reviews.unique_split(
        random.Random(13), {"sentiment": 1000, "topic": 1000}, exclude=seen
    )
    for field, rows in drawn.items():
        reviews.write_jsonl(
            HERE / f"hidden/validation_{field}.jsonl",
            [{"text": r["text"], "label": f"{field}:{r[field]}"} for r in rows],
        )


def main() -> None:
    from transformers import BertForSequenceClassification, BertModel

    splits = draw()
    build_validation(splits)

    def rows(split: str, field: str) -> list[dict]:
        return [{"text": r["text"], "label": f"{field}:{r[field]}"} for r in splits[split]]

    reviews.write_jsonl(HERE / "starter/data/valid_sentiment.jsonl", rows("valid", "sentiment"))
    reviews.write_jsonl(HERE / "starter/data/valid_topic.jsonl", rows("valid2", "topic"))
    reviews.write_jsonl(HERE / "hidden/test_sentiment.jsonl", rows("test", "sentiment"))
    reviews.write_jsonl(HERE / "hidden/test_topic.jsonl", rows("test2", "topic"))

    reviews.seed_everything(0)
    # The masked-LM checkpoint has no pooler: it is initialized here, once, with seed 0.
    base = BertModel.from_pretrained(SOURCE_BASE, add_pooling_layer=True)
    shutil.rmtree(MODELS, ignore_errors=True)
    base.save_pretrained(MODELS / "base")
    tok = reviews.tokenizer()
    tok.save_pretrained(MODELS / "base")

    for name, labels, steps in (("sentiment", SENTIMENT, 1200), ("topic", TOPIC, 1200)):
        reviews.seed_everything(1)  # the head's initialization
        model = BertForSequenceClassification.from_pretrained(
            MODELS / "base", num_labels=len(labels), id2label=dict(enumerate(labels)),
            label2id={label: i for i, label in enumerate(labels)},
        )  # fmt: skip
        train = rows(name, name)
        # Linear probe first, then a gentle full fine-tune: the experts stay near the base
        # (as experts fine-tuned from one checkpoint usually are), which is what merging needs.
        for param in model.bert.parameters():
            param.requires_grad = False
        reviews.finetune(model, tok, train, "label", labels, steps=300, lr=1e-2)
        for param in model.bert.parameters():
            param.requires_grad = True
        reviews.finetune(model, tok, train, "label", labels, steps=steps, lr=1e-4)
        test = rows("test" if name == "sentiment" else "test2", name)
        print(name, "expert test accuracy", reviews.accuracy(model, tok, test, "label", labels))
        model.save_pretrained(MODELS / name)
        tok.save_pretrained(MODELS / name)


if __name__ == "__main__":
    if sys.argv[1:] == ["--validation"]:
        build_validation(draw())
    else:
        main()
