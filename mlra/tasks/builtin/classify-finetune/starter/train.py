"""Baseline: fine-tune the given pretrained encoder (`base_model/`) to classify review sentiment.

Usage (the baseline recipe, well under a minute on one CPU thread, `--threads 1`, the default):

    python train.py --out submission

It puts a fresh classification head on the pretrained model (the pooled [CLS]
vector, as `BertForSequenceClassification` does), trains everything with
AdamW and a one-cycle learning-rate schedule on `data/train.jsonl`, reports
accuracy on `data/valid.jsonl`, and saves model and tokenizer with
`save_pretrained`. Runs are deterministic for a given machine and thread count.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer, BertForSequenceClassification

LABELS = ["negative", "positive"]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", type=Path, default=Path("base_model"))
    p.add_argument("--train", type=Path, default=Path("data/train.jsonl"))
    p.add_argument("--valid", type=Path, default=Path("data/valid.jsonl"))
    p.add_argument("--out", type=Path, default=Path("submission"))
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--warmup", type=float, default=0.1, help="fraction of steps spent warming up")
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads", type=int, default=1,
        help="torch threads. 1 by default: on a busy 2-core machine 2 threads ran 5x slower than 1; scores can differ slightly between counts",
    )
    return p.parse_args()


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@torch.no_grad()
def accuracy(model, tok, rows: list[dict]) -> float:
    model.eval()
    correct = 0
    for i in range(0, len(rows), 256):
        batch = rows[i : i + 256]
        enc = tok([r["text"] for r in batch], padding=True, return_tensors="pt")
        pred = model(**enc).logits.argmax(-1).tolist()
        correct += sum(LABELS[p] == r["label"] for p, r in zip(pred, batch))
    model.train()
    return correct / len(rows)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    tok = AutoTokenizer.from_pretrained(args.base)
    model = BertForSequenceClassification.from_pretrained(
        args.base,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={name: i for i, name in enumerate(LABELS)},
    )
    train, valid = read(args.train), read(args.valid)
    enc = tok([r["text"] for r in train], padding=True, return_tensors="pt")
    y = torch.tensor([LABELS.index(r["label"]) for r in train])

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=args.lr, total_steps=args.steps, pct_start=args.warmup
    )
    gen = torch.Generator().manual_seed(args.seed)
    model.train()
    for step in range(1, args.steps + 1):
        idx = torch.randint(0, len(train), (args.batch_size,), generator=gen)
        out = model(
            input_ids=enc["input_ids"][idx],
            attention_mask=enc["attention_mask"][idx],
            labels=y[idx],
        )
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        sched.step()
        if step % args.eval_every == 0 or step == args.steps:
            print(f"step {step} loss {out.loss.item():.3f} valid acc {accuracy(model, tok, valid):.4f}", flush=True)

    # Write next to the target and rename, so `submission/` is never half-written.
    tmp = args.out.with_name(args.out.name + ".tmp")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if args.out.exists():
        import shutil

        shutil.rmtree(args.out)
    tmp.rename(args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
