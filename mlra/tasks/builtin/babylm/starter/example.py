"""A small GPT-2 trained from scratch on the BabyLM strict-small corpus.

A starting point: a 6-layer model, 256-token blocks, a few thousand steps.
The tokenizer is trained on the corpus too (GPT-2's byte-level BPE algorithm,
a vocabulary learned from the training split): "train strictly on the dataset
provided" covers the tokenizer, and a pretrained vocabulary is refused.
Saves the model and tokenizer to `submission/`.
"""

from datasets import load_dataset
from transformers import (
    DataCollatorForLanguageModeling,
    GPT2Config,
    GPT2LMHeadModel,
    GPT2TokenizerFast,
    Trainer,
    TrainingArguments,
)

BLOCK = 256

dataset = load_dataset("AlgorithmicResearchGroup/babylm")
VOCAB = 16_000
# GPT-2's tokenization algorithm and special tokens, with a vocabulary learned from the
# corpus alone (GPT-2's own vocabulary was learned from web text, and is refused).
tokenizer = GPT2TokenizerFast.from_pretrained("gpt2").train_new_from_iterator(
    (row["content"] for row in dataset["train"]), vocab_size=VOCAB
)
tokenizer.pad_token = tokenizer.eos_token


def tokenize(batch):
    return tokenizer(batch["content"])


def group(batch):
    ids = [t for doc in batch["input_ids"] for t in [*doc, tokenizer.eos_token_id]]
    n = len(ids) // BLOCK * BLOCK
    return {"input_ids": [ids[i : i + BLOCK] for i in range(0, n, BLOCK)]}


tokenized = dataset.map(tokenize, batched=True, remove_columns=["filename", "content"])
blocks = tokenized.map(group, batched=True, remove_columns=tokenized["train"].column_names)

config = GPT2Config(vocab_size=len(tokenizer), n_positions=BLOCK, n_layer=6, n_head=6, n_embd=384)
model = GPT2LMHeadModel(config)  # random initialization: from scratch

args = TrainingArguments(
    output_dir="checkpoints",
    max_steps=5000,
    per_device_train_batch_size=64,
    learning_rate=1e-3,
    weight_decay=0.1,
    adam_beta2=0.95,
    warmup_steps=200,
    bf16=True,
    eval_strategy="steps",
    eval_steps=500,
    logging_steps=100,
    save_strategy="no",
    report_to=[],
    seed=142,
)
trainer = Trainer(
    model=model,
    args=args,
    train_dataset=blocks["train"],
    eval_dataset=blocks["dev"],
    data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
)
trainer.train()
model.save_pretrained("submission")
tokenizer.save_pretrained("submission")
