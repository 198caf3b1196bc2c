"""Baseline: train a byte-level BPE tokenizer and a small Llama-style causal LM from scratch.

Usage (the baseline recipe, about a minute on one CPU thread, `--threads 1`, the default):

    python train.py --out submission

Everything that matters is a flag (see `python train.py --help`): tokenizer
vocabulary, model width/depth, context length, batch size, learning rate and
the number of optimizer steps. Runs are deterministic for a given machine and
thread count: seeds are fixed and the budget is a number of steps, not seconds
(`--max-minutes` is a safety stop only).

The result is a folder that `transformers` loads with
`AutoModelForCausalLM.from_pretrained(...)` and `AutoTokenizer.from_pretrained(...)`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

EOS = "<|endoftext|>"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", type=Path, default=Path("data/train.txt"))
    p.add_argument("--valid", type=Path, default=Path("data/valid.txt"))
    p.add_argument("--out", type=Path, default=Path("submission"))
    p.add_argument("--vocab-size", type=int, default=2048)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=0, help="MLP width (0: 8/3 * d-model, rounded)")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads", type=int, default=1,
        help="torch threads. 1 by default: on a busy 2-core machine 2 threads ran 5x slower than 1; scores can differ slightly between counts",
    )
    p.add_argument("--max-minutes", type=float, default=0.0, help="stop early after this long (0: off)")
    return p.parse_args()


def train_tokenizer(path: Path, vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE (like GPT-2's): lossless on any text, no unknown tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(path)], trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=EOS, eos_token=EOS, pad_token=EOS, unk_token=None
    )


def encode(tokenizer: PreTrainedTokenizerFast, path: Path) -> torch.Tensor:
    """The file as one token stream, paragraphs kept, EOS at the start (as evaluation has)."""
    text = path.read_text(encoding="utf-8")
    ids = [tokenizer.eos_token_id, *tokenizer(text)["input_ids"]]
    return torch.tensor(ids, dtype=torch.long)


def batches(data: torch.Tensor, seq_len: int, batch_size: int, gen: torch.Generator):
    """Random windows of seq_len tokens, forever (the model shifts labels itself)."""
    while True:
        starts = torch.randint(0, len(data) - seq_len, (batch_size,), generator=gen)
        yield torch.stack([data[s : s + seq_len] for s in starts.tolist()])


@torch.no_grad()
def evaluate(model: LlamaForCausalLM, data: torch.Tensor, seq_len: int, n_batches: int, bs: int) -> float:
    """Mean token loss on fixed, evenly spaced windows of the validation text."""
    model.eval()
    n = n_batches * bs
    starts = torch.linspace(0, len(data) - seq_len - 1, n).long().tolist()
    losses = []
    for i in range(0, n, bs):
        x = torch.stack([data[s : s + seq_len] for s in starts[i : i + bs]])
        losses.append(model(input_ids=x, labels=x).loss.item())
    model.train()
    return float(np.mean(losses))


def main() -> None:
    args = parse_args()
    started = time.monotonic()
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    tokenizer = train_tokenizer(args.train, args.vocab_size)
    train = encode(tokenizer, args.train)
    valid = encode(tokenizer, args.valid) if args.valid.exists() else None
    print(f"tokenizer: {len(tokenizer)} tokens; train {len(train):,} tokens"
          + (f", valid {len(valid):,}" if valid is not None else ""), flush=True)

    ffn = args.ffn or int(math.ceil(args.d_model * 8 / 3 / 64) * 64)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.d_model,
        intermediate_size=ffn,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        max_position_embeddings=args.seq_len,
        attention_dropout=args.dropout,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters, d={args.d_model}, layers={args.layers}", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optim = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.95),
    )

    def lr_at(step: int) -> float:
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        progress = (step - args.warmup) / max(1, args.steps - args.warmup)
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * cosine)

    gen = torch.Generator().manual_seed(args.seed)
    stream = batches(train, args.seq_len, args.batch_size, gen)
    model.train()
    step = 0
    for step in range(1, args.steps + 1):
        for group in optim.param_groups:
            group["lr"] = lr_at(step - 1)
        x = next(stream)
        loss = model(input_ids=x, labels=x).loss
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        elapsed = time.monotonic() - started
        if step % args.eval_every == 0 or step == args.steps:
            msg = f"step {step}/{args.steps} loss {loss.item():.3f} ({elapsed:.0f}s)"
            if valid is not None:
                msg += f" valid {evaluate(model, valid, args.seq_len, args.eval_batches, args.batch_size):.3f}"
            print(msg, flush=True)
        if args.max_minutes and elapsed > args.max_minutes * 60:
            print(f"stopping at step {step}: --max-minutes {args.max_minutes} reached", flush=True)
            break

    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    # What was trained, and nothing of how long it took: the file is the same on every run
    # of the same flags (its size in an `ls -l` too, which a replay of the run compares).
    info = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    info.update(steps_done=step, parameters=n_params)
    (args.out / "training_args.json").write_text(json.dumps(info, indent=2))
    print(f"saved to {args.out} after {time.monotonic() - started:.0f}s", flush=True)


if __name__ == "__main__":
    main()
