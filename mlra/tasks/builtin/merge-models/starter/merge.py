"""Baseline: merge the sentiment expert and the topic expert into one model, without training.

Usage (the baseline recipe, a few seconds on one CPU thread, `--threads 1`, the default):

    python merge.py --out submission

Both experts were fine-tuned from `models/base/` (all weights). The merged
model is one `BertForSequenceClassification` with the shared encoder merged
and the two classification heads stacked, so it has six labels:
"sentiment:negative", "sentiment:positive", "topic:food", "topic:film",
"topic:hotel", "topic:phone" (the evaluation compares each sub-task's labels
among themselves).

Encoder merging methods (`--method`):
- `average`: the mean of the two experts' weights (the baseline).
- `task_arithmetic`: base + scale x (sum of the task vectors expert - base).
- `ties`: task vectors trimmed to their largest `--density` fraction, signs
  elected per weight, agreeing values averaged, then base + scale x that.
`--eval` reports accuracy on the given validation sets, for choosing settings.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from transformers import AutoTokenizer, BertForSequenceClassification, BertModel

EXPERTS = ("sentiment", "topic")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, default=Path("models"))
    p.add_argument("--data", type=Path, default=Path("data"))
    p.add_argument("--out", type=Path, default=Path("submission"))
    p.add_argument("--method", choices=["average", "task_arithmetic", "ties"], default="average")
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--density", type=float, default=0.2)
    p.add_argument("--eval", action="store_true", help="report accuracy on the validation sets")
    p.add_argument(
        "--threads", type=int, default=1,
        help="torch threads. 1 by default: on a busy 2-core machine 2 threads ran 5x slower than 1; scores can differ slightly between counts",
    )
    return p.parse_args()


def task_vectors(base: dict, experts: list[dict]) -> list[dict]:
    return [{k: e[k] - base[k] for k in base} for e in experts]


def ties(vectors: list[dict], density: float) -> dict:
    merged = {}
    for key in vectors[0]:
        stack = torch.stack([v[key] for v in vectors])
        flat = stack.view(len(vectors), -1)
        k = max(1, int(density * flat.shape[1]))
        threshold = flat.abs().kthvalue(flat.shape[1] - k + 1, dim=1, keepdim=True).values
        trimmed = torch.where(flat.abs() >= threshold, flat, torch.zeros_like(flat))
        sign = torch.sign(trimmed.sum(0))
        agree = (torch.sign(trimmed) == sign) & (trimmed != 0)
        total = (trimmed * agree).sum(0)
        count = agree.sum(0).clamp(min=1)
        merged[key] = (total / count).view_as(stack[0])
    return merged


def merge_encoder(args: argparse.Namespace, experts: list[BertForSequenceClassification]) -> dict:
    encoders = [e.bert.state_dict() for e in experts]
    if args.method == "average":
        return {k: sum(e[k] for e in encoders) / len(encoders) for k in encoders[0]}
    base = BertModel.from_pretrained(args.models / "base").state_dict()
    vectors = task_vectors(base, encoders)
    if args.method == "task_arithmetic":
        delta = {k: sum(v[k] for v in vectors) for k in base}
    else:
        delta = ties(vectors, args.density)
    return {k: base[k] + args.scale * delta[k] for k in base}


@torch.no_grad()
def accuracy(model, tok, path: Path) -> float:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    names = sorted({r["label"] for r in rows})
    ids = [model.config.label2id[n] for n in names]
    enc = tok([r["text"] for r in rows], padding=True, return_tensors="pt")
    pred = model(**enc).logits[:, ids].argmax(-1).tolist()
    return sum(names[p] == r["label"] for p, r in zip(pred, rows)) / len(rows)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(args.models / "base")
    experts = [BertForSequenceClassification.from_pretrained(args.models / n).eval() for n in EXPERTS]

    labels = [experts[i].config.id2label[j] for i in range(len(experts)) for j in range(experts[i].config.num_labels)]
    config = experts[0].config
    config.num_labels = len(labels)
    config.id2label = dict(enumerate(labels))
    config.label2id = {name: i for i, name in enumerate(labels)}
    merged = BertForSequenceClassification(config).eval()
    merged.bert.load_state_dict(merge_encoder(args, experts))
    with torch.no_grad():
        merged.classifier.weight.copy_(torch.cat([e.classifier.weight for e in experts]))
        merged.classifier.bias.copy_(torch.cat([e.classifier.bias for e in experts]))

    if args.eval:
        for name, expert in zip(EXPERTS, experts):
            path = args.data / f"valid_{name}.jsonl"
            print(f"{name}: expert {accuracy(expert, tok, path):.4f}  merged {accuracy(merged, tok, path):.4f}")

    tmp = args.out.with_name(args.out.name + ".tmp")
    merged.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if args.out.exists():
        shutil.rmtree(args.out)
    tmp.rename(args.out)
    print(f"saved {args.out} ({merged.num_parameters():,} parameters, method {args.method})")


if __name__ == "__main__":
    main()
