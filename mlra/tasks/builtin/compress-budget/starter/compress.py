"""Baseline: compress the teacher (`teacher/`) by structured pruning, then fine-tune the student.

Usage (the baseline recipe, well under a minute on one CPU thread, `--threads 1`, the default):

    python compress.py --out submission

1. Pruning: the student keeps `--layers` of the teacher's layers, the
   `--hidden` residual dimensions with the largest embedding norms, the
   `--heads` attention heads with the largest weight norms in each kept layer,
   and the `--ffn` feed-forward neurons with the largest weight norms; every
   weight matrix is sliced accordingly, so the student starts from the
   teacher's weights in a `BertForSequenceClassification` of smaller shape.
2. Recovery: the student is trained on `data/train.jsonl` with cross-entropy
   on the labels (`--distill` > 0 mixes in a KL loss against the teacher's
   soft predictions, on `data/unlabelled.txt` too, which has no labels).

It prints the student's parameter count, checks it against `--budget`, reports
validation accuracy and saves model and tokenizer with `save_pretrained`.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--teacher", type=Path, default=Path("teacher"))
    p.add_argument("--data", type=Path, default=Path("data"))
    p.add_argument("--out", type=Path, default=Path("submission"))
    p.add_argument("--budget", type=int, default=100_000, help="the task's parameter limit")
    p.add_argument("--layers", type=str, default="0,2", help="teacher layers to keep, comma-separated")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=2, help="heads kept per layer (head size stays the teacher's)")
    p.add_argument("--ffn", type=int, default=128)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--distill", type=float, default=0.0, help="weight of the KL loss against the teacher (0: labels only)")
    p.add_argument("--temperature", type=float, default=2.0)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads", type=int, default=1,
        help="torch threads. 1 by default: on a busy 2-core machine 2 threads ran 5x slower than 1; scores can differ slightly between counts",
    )
    return p.parse_args()


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def prune(teacher: BertForSequenceClassification, layers: list[int], hidden: int, heads: int, ffn: int) -> BertForSequenceClassification:
    tc = teacher.config
    head_size = tc.hidden_size // tc.num_attention_heads
    sd = teacher.state_dict()
    emb = sd["bert.embeddings.word_embeddings.weight"]
    keep_h = emb.norm(dim=0).argsort(descending=True)[:hidden].sort().values

    cfg = BertConfig(**{**tc.to_dict(), "hidden_size": hidden, "num_hidden_layers": len(layers),
                        "num_attention_heads": heads, "intermediate_size": ffn})
    # A student whose head size differs from the teacher's would not match the sliced weights.
    assert hidden == heads * head_size, f"--hidden must be --heads x {head_size} (the teacher's head size)"
    student = BertForSequenceClassification(cfg)
    new = {}
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        new[f"bert.embeddings.{name}.weight"] = sd[f"bert.embeddings.{name}.weight"][:, keep_h]
    for part in ("weight", "bias"):
        new[f"bert.embeddings.LayerNorm.{part}"] = sd[f"bert.embeddings.LayerNorm.{part}"][keep_h]
    for i, src in enumerate(layers):
        p = f"bert.encoder.layer.{src}."
        q = f"bert.encoder.layer.{i}."
        a = p + "attention."
        # Heads ranked by the norm of their query, key and value weights.
        qkv = sum(sd[a + f"self.{m}.weight"].view(tc.num_attention_heads, head_size, -1).pow(2).sum((1, 2))
                  for m in ("query", "key", "value"))
        kept_heads = qkv.argsort(descending=True)[:heads].sort().values
        keep_a = torch.cat([torch.arange(h * head_size, (h + 1) * head_size) for h in kept_heads.tolist()])
        for m in ("query", "key", "value"):
            new[q + f"attention.self.{m}.weight"] = sd[a + f"self.{m}.weight"][keep_a][:, keep_h]
            new[q + f"attention.self.{m}.bias"] = sd[a + f"self.{m}.bias"][keep_a]
        new[q + "attention.output.dense.weight"] = sd[a + "output.dense.weight"][keep_h][:, keep_a]
        new[q + "attention.output.dense.bias"] = sd[a + "output.dense.bias"][keep_h]
        for part in ("weight", "bias"):
            new[q + f"attention.output.LayerNorm.{part}"] = sd[a + f"output.LayerNorm.{part}"][keep_h]
            new[q + f"output.LayerNorm.{part}"] = sd[p + f"output.LayerNorm.{part}"][keep_h]
        w_in, w_out = sd[p + "intermediate.dense.weight"], sd[p + "output.dense.weight"]
        keep_f = (w_in.norm(dim=1) * w_out.norm(dim=0)).argsort(descending=True)[:ffn].sort().values
        new[q + "intermediate.dense.weight"] = w_in[keep_f][:, keep_h]
        new[q + "intermediate.dense.bias"] = sd[p + "intermediate.dense.bias"][keep_f]
        new[q + "output.dense.weight"] = w_out[keep_h][:, keep_f]
        new[q + "output.dense.bias"] = sd[p + "output.dense.bias"][keep_h]
    new["bert.pooler.dense.weight"] = sd["bert.pooler.dense.weight"][keep_h][:, keep_h]
    new["bert.pooler.dense.bias"] = sd["bert.pooler.dense.bias"][keep_h]
    new["classifier.weight"] = sd["classifier.weight"][:, keep_h]
    new["classifier.bias"] = sd["classifier.bias"]
    missing, unexpected = student.load_state_dict({k: v.clone() for k, v in new.items()}, strict=False)
    assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)
    return student


@torch.no_grad()
def accuracy(model, tok, rows: list[dict]) -> float:
    model.eval()
    labels = model.config.id2label
    correct = 0
    for i in range(0, len(rows), 256):
        batch = rows[i : i + 256]
        enc = tok([r["text"] for r in batch], padding=True, return_tensors="pt")
        pred = model(**enc).logits.argmax(-1).tolist()
        correct += sum(labels[p] == r["label"] for p, r in zip(pred, batch))
    model.train()
    return correct / len(rows)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    tok = AutoTokenizer.from_pretrained(args.teacher)
    teacher = BertForSequenceClassification.from_pretrained(args.teacher).eval()
    train, valid = read(args.data / "train.jsonl"), read(args.data / "valid.jsonl")
    print(f"teacher: {teacher.num_parameters():,} parameters, valid acc {accuracy(teacher, tok, valid):.4f}")

    layers = [int(x) for x in args.layers.split(",")]
    student = prune(teacher, layers, args.hidden, args.heads, args.ffn)
    n = student.num_parameters()
    print(f"student: {n:,} parameters (budget {args.budget:,}), valid acc after pruning {accuracy(student, tok, valid):.4f}")
    if n > args.budget:
        raise SystemExit(f"the student has {n:,} parameters, over the budget of {args.budget:,}")

    label2id = student.config.label2id
    texts = [r["text"] for r in train]
    y = torch.tensor([label2id[r["label"]] for r in train] + [-100] * 0)
    if args.distill > 0:
        texts += [t for t in (args.data / "unlabelled.txt").read_text().splitlines() if t.strip()]
        y = torch.cat([y, torch.full((len(texts) - len(train),), -100)])
    enc = tok(texts, padding=True, return_tensors="pt")
    if args.distill > 0:
        with torch.no_grad():
            soft = torch.cat([teacher(input_ids=enc["input_ids"][i : i + 512],
                                      attention_mask=enc["attention_mask"][i : i + 512]).logits
                              for i in range(0, len(texts), 512)])

    opt = torch.optim.AdamW(student.parameters(), lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(args.seed)
    student.train()
    for step in range(1, args.steps + 1):
        idx = torch.randint(0, len(texts), (args.batch_size,), generator=gen)
        logits = student(input_ids=enc["input_ids"][idx], attention_mask=enc["attention_mask"][idx]).logits
        labelled = y[idx] >= 0
        loss = F.cross_entropy(logits[labelled], y[idx][labelled]) if labelled.any() else logits.sum() * 0
        if args.distill > 0:
            t = args.temperature
            kl = F.kl_div(F.log_softmax(logits / t, -1), F.softmax(soft[idx] / t, -1), reduction="batchmean") * t * t
            loss = (1 - args.distill) * loss + args.distill * kl
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % args.eval_every == 0 or step == args.steps:
            print(f"step {step} loss {loss.item():.3f} valid acc {accuracy(student, tok, valid):.4f}", flush=True)

    tmp = args.out.with_name(args.out.name + ".tmp")
    student.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if args.out.exists():
        shutil.rmtree(args.out)
    tmp.rename(args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
