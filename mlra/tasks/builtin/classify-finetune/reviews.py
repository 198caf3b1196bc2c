"""The small world the offline classification tasks live in: generated product reviews.

Shared by the build scripts of `classify-finetune`, `compress-budget` and
`merge-models` (never copied into a workspace). A review is one sentence from a
small grammar: one or two clauses about one topic (food, film, hotel or phone),
each clause praising or criticising a thing of that topic, with negation
("was not bland"), intensifiers and clause links whose meaning decides the
review's overall sentiment ("X but Y": Y decides; "although X, Y": Y decides;
"X, although Y": X decides). Bag-of-words models therefore stay well below a
model that reads the structure, which leaves room between a baseline and a
good solution. Everything is generated with seeded RNGs, so the data and the
models built from it are the same on every run of the build scripts.

The vocabulary is closed, so a word-level tokenizer covers it exactly.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TOPICS: dict[str, dict[str, list[str]]] = {
    "food": {
        "singular": ["soup", "pasta", "steak", "salad", "pizza", "dessert", "bread", "curry"],
        "plural": ["fries", "noodles", "dumplings", "portions", "waiters", "prices"],
        "positive": ["delicious", "tasty", "fresh", "generous", "crispy", "flavourful"],
        "negative": ["bland", "stale", "greasy", "overcooked", "soggy", "cold"],
    },
    "film": {
        "singular": [
            "plot",
            "ending",
            "script",
            "soundtrack",
            "movie",
            "villain",
            "sequel",
            "cast",
        ],
        "plural": ["actors", "dialogues", "effects", "jokes", "scenes", "characters"],
        "positive": ["gripping", "moving", "funny", "clever", "stunning", "original"],
        "negative": ["boring", "predictable", "dull", "confusing", "cheesy", "slow"],
    },
    "hotel": {
        "singular": ["room", "bed", "lobby", "pool", "breakfast", "bathroom", "view", "staff"],
        "plural": ["rooms", "beds", "towels", "pillows", "showers", "receptionists"],
        "positive": ["clean", "spacious", "quiet", "comfortable", "cosy", "welcoming"],
        "negative": ["dirty", "cramped", "noisy", "shabby", "smelly", "unfriendly"],
    },
    "phone": {
        "singular": ["battery", "screen", "camera", "charger", "case", "speaker", "phone", "app"],
        "plural": ["buttons", "updates", "photos", "menus", "cables", "headphones"],
        "positive": ["fast", "sturdy", "sleek", "bright", "reliable", "sharp"],
        "negative": ["laggy", "flimsy", "buggy", "dim", "fragile", "blurry"],
    },
}
GENERAL = {
    "positive": ["great", "excellent", "wonderful", "lovely", "good", "superb", "nice", "perfect"],
    "negative": [
        "awful",
        "terrible",
        "bad",
        "poor",
        "horrible",
        "disappointing",
        "mediocre",
        "dreadful",
    ],
}
INTENSIFIERS = ["very", "really", "quite", "truly", "rather", "incredibly"]
DETERMINERS = ["the", "the", "the", "my", "our", "their"]
CLOSERS = {
    "positive": [
        "i loved it",
        "highly recommended",
        "i will come back",
        "five stars",
        "worth every penny",
    ],
    "negative": [
        "i hated it",
        "avoid it",
        "i will never come back",
        "one star",
        "a waste of money",
    ],
}
SENTIMENTS = ["negative", "positive"]
TOPIC_NAMES = list(TOPICS)
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
MAX_LEN = 48


def vocabulary() -> list[str]:
    """Every word the grammar can produce, in a fixed order (the tokenizer's ids)."""
    words: list[str] = []
    for topic in TOPICS.values():
        for group in topic.values():
            words += group
    for group in GENERAL.values():
        words += group
    words += INTENSIFIERS + DETERMINERS
    for group in CLOSERS.values():
        for phrase in group:
            words += phrase.split()
    words += ["was", "were", "is", "are", "not", "never", "and", "but", "although", ",", ".", "too"]
    seen: dict[str, None] = {}
    for word in words:
        seen.setdefault(word, None)
    return SPECIALS + list(seen)


def _flip(polarity: str) -> str:
    return "negative" if polarity == "positive" else "positive"


def clause(rng: random.Random, topic: str, polarity: str, *, negation_rate: float = 0.35) -> str:
    """One clause about `topic` whose meaning is `polarity` (negation may flip the adjective)."""
    t = TOPICS[topic]
    plural = rng.random() < 0.4
    noun = rng.choice(t["plural" if plural else "singular"])
    verb = rng.choice(["were", "are"] if plural else ["was", "is"])
    negated = rng.random() < negation_rate
    word_polarity = _flip(polarity) if negated else polarity
    pool = t[word_polarity] if rng.random() < 0.65 else GENERAL[word_polarity]
    words = [rng.choice(DETERMINERS), noun, verb]
    if negated:
        words.append(rng.choice(["not", "not", "never"]))
    if rng.random() < 0.3:
        words.append(rng.choice(INTENSIFIERS))
    words.append(rng.choice(pool))
    return " ".join(words)


def review(rng: random.Random, topic: str, sentiment: str) -> str:
    """A one-sentence review of `topic` whose overall sentiment is `sentiment`."""
    other = _flip(sentiment)
    form = rng.random()
    if form < 0.25:
        text = clause(rng, topic, sentiment)
    elif form < 0.45:
        text = f"{clause(rng, topic, other)} but {clause(rng, topic, sentiment)}"
    elif form < 0.62:
        text = f"although {clause(rng, topic, other)} , {clause(rng, topic, sentiment)}"
    elif form < 0.80:
        text = f"{clause(rng, topic, sentiment)} , although {clause(rng, topic, other)}"
    else:
        text = f"{clause(rng, topic, sentiment)} and {clause(rng, topic, sentiment)} too"
    return text + " ."


def labelled(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """`n` reviews with both labels, topics and sentiments balanced in expectation."""
    rows = []
    for _ in range(n):
        topic = rng.choice(TOPIC_NAMES)
        sentiment = rng.choice(SENTIMENTS)
        rows.append({"text": review(rng, topic, sentiment), "sentiment": sentiment, "topic": topic})
    return rows


def documents(rng: random.Random, n: int) -> Iterator[str]:
    """Unlabelled multi-sentence reviews for pretraining: the closing remark agrees with the
    overall sentiment, so a masked-LM learns which words are praise and which are blame."""
    for _ in range(n):
        topic = rng.choice(TOPIC_NAMES)
        sentiment = rng.choice(SENTIMENTS)
        yield f"{review(rng, topic, sentiment)} {rng.choice(CLOSERS[sentiment])} ."


def unique_split(
    rng: random.Random, sizes: dict[str, int], *, exclude: set[str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Disjoint labelled splits: no sentence appears in two splits (or in `exclude`)."""
    seen = set(exclude or ())
    out: dict[str, list[dict[str, Any]]] = {}
    for name, size in sizes.items():
        rows: list[dict[str, Any]] = []
        while len(rows) < size:
            (row,) = labelled(rng, 1)
            if row["text"] in seen:
                continue
            seen.add(row["text"])
            rows.append(row)
        out[name] = rows
    return out


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


# --- tokenizer and models (imported lazily: the grammar alone needs no ML packages) ------


def tokenizer() -> Any:
    """A word-level tokenizer over the closed vocabulary, wrapped for `AutoTokenizer`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=MAX_LEN,
    )


def bert_config(
    *, hidden: int, layers: int, heads: int, ffn: int, labels: list[str] | None = None
) -> Any:
    from transformers import BertConfig

    extra: dict[str, Any] = {}
    if labels is not None:
        extra = {
            "num_labels": len(labels),
            "id2label": dict(enumerate(labels)),
            "label2id": {name: i for i, name in enumerate(labels)},
        }
    return BertConfig(
        vocab_size=len(vocabulary()),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
        max_position_embeddings=MAX_LEN,
        type_vocab_size=1,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        **extra,
    )


def seed_everything(seed: int, threads: int = 2) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)


def pretrain_mlm(texts: list[str], *, hidden: int, layers: int, heads: int, ffn: int, steps: int,
                 batch_size: int = 64, lr: float = 2e-3, seed: int = 0) -> tuple[Any, Any]:  # fmt: skip
    """A small BERT pretrained with masked-LM on `texts`: the shared starting point."""
    import torch
    from transformers import BertForMaskedLM

    seed_everything(seed)
    tok = tokenizer()
    model = BertForMaskedLM(bert_config(hidden=hidden, layers=layers, heads=heads, ffn=ffn))
    enc = tok(texts, padding="max_length", truncation=True, max_length=MAX_LEN, return_tensors="pt")
    ids, attn = enc["input_ids"], enc["attention_mask"]
    special = ids < len(SPECIALS)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for step in range(steps):
        idx = torch.randint(0, len(texts), (batch_size,), generator=gen)
        width = int(attn[idx].sum(1).max())  # padding beyond the longest text changes nothing
        x, a = ids[idx, :width].clone(), attn[idx, :width]
        chosen = (torch.rand(x.shape, generator=gen) < 0.15) & ~special[idx, :width]
        labels = torch.where(chosen, x, torch.full_like(x, -100))
        x[chosen] = tok.mask_token_id
        loss = model(input_ids=x, attention_mask=a, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 200 == 0 or step == steps - 1:
            print(f"mlm step {step} loss {loss.item():.3f}", flush=True)
    return model, tok


def finetune(model: Any, tok: Any, rows: list[dict[str, Any]], field: str, labels: list[str], *,
             steps: int, batch_size: int = 32, lr: float = 1e-3, seed: int = 0) -> Any:  # fmt: skip
    """Plain cross-entropy fine-tuning of a sequence classifier on `rows[field]`."""
    import torch

    seed_everything(seed)
    enc = tok([r["text"] for r in rows], padding="max_length", truncation=True, max_length=MAX_LEN,
              return_tensors="pt")  # fmt: skip
    y = torch.tensor([labels.index(r[field]) for r in rows])
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for step in range(steps):
        idx = torch.randint(0, len(rows), (batch_size,), generator=gen)
        width = int(enc["attention_mask"][idx].sum(1).max())
        out = model(input_ids=enc["input_ids"][idx, :width], attention_mask=enc["attention_mask"][idx, :width],
                    labels=y[idx])  # fmt: skip
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        sched.step()
        if step % 200 == 0 or step == steps - 1:
            print(f"finetune step {step} loss {out.loss.item():.3f}", flush=True)
    model.eval()
    return model


def accuracy(
    model: Any, tok: Any, rows: list[dict[str, Any]], field: str, labels: list[str]
) -> float:
    import torch

    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(rows), 256):
            batch = rows[i : i + 256]
            enc = tok([r["text"] for r in batch], padding=True, return_tensors="pt")
            pred = model(**enc).logits.argmax(-1).tolist()
            correct += sum(labels[p] == r[field] for p, r in zip(pred, batch, strict=True))
    return correct / len(rows)
