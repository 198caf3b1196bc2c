"""Hidden evaluation script: accuracy of a submitted sequence classifier on held-out reviews.

Called by the script evaluator as

    python evaluate.py ARTIFACT TASK_ROOT OUT_JSON NAME=TEST_JSONL [NAME=TEST_JSONL ...]

Each test file holds {"text", "label"} rows. The submission is a folder that
`AutoModelForSequenceClassification` and `AutoTokenizer` load (safetensors
weights, no remote code). Its `config.id2label` must name every label of a test
file; a prediction for that file is the arg-max over those labels' logits only,
so one model can carry several label sets (e.g. a merged model). The score is
the mean accuracy over the test files; each file's accuracy is also reported.
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def fail(message: str) -> None:
    print(f"evaluation error: {message}", file=sys.stderr)
    raise SystemExit(1)


def main(argv: list[str]) -> None:
    artifact, root, out = Path(argv[0]), Path(argv[1]), Path(argv[2])
    tests = [spec.split("=", 1) for spec in argv[3:]]
    if not artifact.is_dir():
        fail(f"the submission must be a model folder; {artifact.name} is not a folder")
    if not (artifact / "config.json").is_file():
        fail(f"{artifact.name} has no config.json (save the model with save_pretrained)")

    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(2)
    try:
        tok = transformers.AutoTokenizer.from_pretrained(str(artifact), trust_remote_code=False, local_files_only=True)
    except Exception as exc:
        fail(f"the submitted tokenizer cannot be loaded: {type(exc).__name__}: {str(exc)[:200]}")
    try:
        model = transformers.AutoModelForSequenceClassification.from_pretrained(
            str(artifact), trust_remote_code=False, use_safetensors=True, local_files_only=True
        )
    except Exception as exc:
        fail(f"the submitted model cannot be loaded: {type(exc).__name__}: {str(exc)[:200]}")
    model.eval()
    names = {str(v): int(k) for k, v in model.config.id2label.items()}

    metrics: dict[str, float] = {}
    accuracies = []
    for name, rel in tests:
        rows = [json.loads(line) for line in (root / rel).read_text().splitlines() if line.strip()]
        labels = sorted({r["label"] for r in rows})
        missing = [label for label in labels if label not in names]
        if missing:
            fail(
                f"config.id2label has no label {missing[0]!r} (it has {sorted(names)}); "
                f"the {name} labels are {labels}"
            )
        ids = torch.tensor([names[label] for label in labels])
        correct = 0
        with torch.no_grad():
            for i in range(0, len(rows), 256):
                batch = rows[i : i + 256]
                enc = tok([r["text"] for r in batch], padding=True, truncation=True, return_tensors="pt")
                logits = model(**enc).logits[:, ids]
                pred = logits.argmax(-1).tolist()
                correct += sum(labels[p] == r["label"] for p, r in zip(pred, batch))
        acc = correct / len(rows)
        metrics[f"{name}/accuracy"] = acc
        metrics[f"{name}/examples"] = float(len(rows))
        accuracies.append(acc)
    metrics["parameters"] = float(sum(p.numel() for p in model.parameters()))
    out.write_text(json.dumps({"score": sum(accuracies) / len(accuracies), "metrics": metrics}))


if __name__ == "__main__":
    main(sys.argv[1:])
