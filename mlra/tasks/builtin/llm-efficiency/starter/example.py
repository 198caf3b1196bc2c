"""Supervised fine-tuning of an approved base model on Dolly-15k (a starting point).

Change BASE to any approved base model; the result goes to `submission/`.
"""

import torch
from datasets import load_dataset
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    Trainer,
    TrainingArguments,
)

BASE = "EleutherAI/pythia-1b"  # an approved family (GPT-NeoX / Pythia)

tokenizer = AutoTokenizer.from_pretrained(BASE)
tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
model = AutoModelForCausalLM.from_pretrained(BASE, torch_dtype=torch.bfloat16)

data = load_dataset("databricks/databricks-dolly-15k", split="train")


def to_text(row):
    context = f"\n\nContext:\n{row['context']}" if row["context"] else ""
    prompt = f"Instruction:\n{row['instruction']}{context}\n\nResponse:\n"
    return {"text": prompt + row["response"] + tokenizer.eos_token}


def tokenize(batch):
    return tokenizer(batch["text"], truncation=True, max_length=512)


data = data.map(to_text).map(tokenize, batched=True, remove_columns=[*data.column_names, "text"])

args = TrainingArguments(
    output_dir="checkpoints",
    num_train_epochs=1,
    per_device_train_batch_size=8,
    gradient_accumulation_steps=4,
    learning_rate=2e-5,
    warmup_ratio=0.03,
    bf16=True,
    logging_steps=20,
    save_strategy="no",
    report_to=[],
)
Trainer(
    model=model,
    args=args,
    train_dataset=data,
    data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
).train()
model.save_pretrained("submission")
tokenizer.save_pretrained("submission")
