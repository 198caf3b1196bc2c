"""Scores an autoformalization model: Lean 3 compile rate, BLEU and ROUGE.

    python evaluate.py SUBMISSION TASK_ROOT OUT_JSON [--problems hub|FILE.jsonl]
        [--limit N] [--max-new-tokens N] [--lean-project DIR] [--lean-timeout S]

The submitted model (a `save_pretrained` folder) writes a formal Lean 3 statement
and proof for each held-out problem from its informal statement and proof, with
the prompt below, greedy decoding. Each output is compiled with `lean` inside a
Lean 3 project that has mathlib (`--lean-project`, default $LEAN_PROJECT or the
current folder); it counts as formalized when Lean accepts it with no error and
no `sorry`. BLEU-4 (corpus, smoothed) and ROUGE-1/2/L (F1, averaged over
problems) compare the output with the reference formal proof.

Score: the compile rate. Without `lean` there is no score: the script says so and
exits with status 3 before loading the model.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

PROMPT = (
    "Informal statement:\n{informal_statement}\n\n"
    "Informal proof:\n{informal_proof}\n\n"
    "Formal statement and proof in Lean 3:\n"
)
HUB_DATASET = "AlgorithmicResearchGroup/math_reasoning_autoformalization_track"
HELD_OUT_EVERY = 20
"""Rows 0, 20, 40, ... of the dataset's train split are the evaluation problems."""
NO_LEAN = (
    "lean (Lean 3) is not installed or not on PATH: the compile rate cannot be measured. "
    "Install Lean 3 with elan (toolchain leanprover-community/lean:3.51.1) and a Lean 3 "
    "mathlib project, and give its folder as --lean-project or $LEAN_PROJECT"
)

TOKEN = re.compile(r"\w+|[^\w\s]")


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def _ngrams(words: list[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def corpus_bleu(hypotheses: list[str], references: list[str], max_n: int = 4) -> float:
    """BLEU-4 over the corpus with add-one smoothing of the higher orders (Lin and Och 2004)."""
    matches = [0] * max_n
    totals = [0] * max_n
    hyp_len = ref_len = 0
    for hyp, ref in zip(hypotheses, references, strict=True):
        h, r = tokens(hyp), tokens(ref)
        hyp_len += len(h)
        ref_len += len(r)
        for n in range(1, max_n + 1):
            hn, rn = _ngrams(h, n), _ngrams(r, n)
            matches[n - 1] += sum(min(c, rn[g]) for g, c in hn.items())
            totals[n - 1] += max(len(h) - n + 1, 0)
    if hyp_len == 0 or matches[0] == 0:
        return 0.0
    logs = []
    for n in range(max_n):
        m, t = (matches[n], totals[n]) if n == 0 else (matches[n] + 1, totals[n] + 1)
        logs.append(math.log(m / t))
    brevity = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return brevity * math.exp(sum(logs) / max_n)


def _f1(overlap: int, hyp: int, ref: int) -> float:
    if overlap == 0 or hyp == 0 or ref == 0:
        return 0.0
    p, r = overlap / hyp, overlap / ref
    return 2 * p * r / (p + r)


def _lcs(a: list[str], b: list[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge(hypothesis: str, reference: str) -> dict[str, float]:
    """ROUGE-1, ROUGE-2 and ROUGE-L F1 of one pair."""
    h, r = tokens(hypothesis), tokens(reference)
    out = {}
    for n in (1, 2):
        hn, rn = _ngrams(h, n), _ngrams(r, n)
        overlap = sum(min(c, rn[g]) for g, c in hn.items())
        out[f"rouge{n}"] = _f1(overlap, max(len(h) - n + 1, 0), max(len(r) - n + 1, 0))
    out["rougeL"] = _f1(_lcs(h, r), len(h), len(r))
    return out


def load_problems(source: str, limit: int | None) -> list[dict[str, str]]:
    if source == "hub":
        from datasets import load_dataset

        rows = load_dataset(HUB_DATASET, split="train")
        problems = [dict(rows[i]) for i in range(0, len(rows), HELD_OUT_EVERY)]
    else:
        with open(source, encoding="utf-8") as fh:
            problems = [json.loads(line) for line in fh if line.strip()]
    return problems[:limit] if limit else problems


def generate(model_dir: Path, problems: list[dict[str, str]], max_new_tokens: int) -> list[str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, trust_remote_code=False, use_safetensors=True, torch_dtype="auto"
    ).to(device)
    model.eval()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    outputs = []
    for problem in problems:
        prompt = PROMPT.format(**problem)
        ids = tokenizer(prompt, return_tensors="pt").to(device)
        with torch.no_grad():
            out = model.generate(
                **ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad
            )
        outputs.append(
            tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        )
    return outputs


def compiles(lean: str, project: Path, source: str, timeout: float) -> bool:
    """Lean accepts `source` with no error and no `sorry`."""
    with tempfile.NamedTemporaryFile("w", suffix=".lean", dir=project, delete=False) as fh:
        fh.write(source)
        path = Path(fh.name)
    try:
        proc = subprocess.run(
            [lean, str(path)],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    finally:
        path.unlink(missing_ok=True)
    log = proc.stdout + proc.stderr
    return proc.returncode == 0 and "error" not in log and "sorry" not in log


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("submission", type=Path)
    parser.add_argument("task_root", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--problems", default="hub")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=768)
    parser.add_argument("--lean-project", type=Path, default=None)
    parser.add_argument("--lean-timeout", type=float, default=120)
    args = parser.parse_args(argv)

    lean = shutil.which("lean")
    if lean is None:
        print(NO_LEAN, file=sys.stderr)
        return 3
    project = args.lean_project or Path(os.environ.get("LEAN_PROJECT", "."))
    problems = load_problems(args.problems, args.limit)
    outputs = generate(args.submission, problems, args.max_new_tokens)
    references = [p["formal_proof"] for p in problems]
    compiled = [compiles(lean, project, o, args.lean_timeout) for o in outputs]
    scores = [rouge(o, r) for o, r in zip(outputs, references, strict=True)]
    metrics = {
        "compile_rate": sum(compiled) / len(compiled),
        "bleu": corpus_bleu(outputs, references),
        **{k: sum(s[k] for s in scores) / len(scores) for k in ("rouge1", "rouge2", "rougeL")},
        "problems": float(len(problems)),
    }
    args.out.write_text(json.dumps({"score": metrics["compile_rate"], "metrics": metrics}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
