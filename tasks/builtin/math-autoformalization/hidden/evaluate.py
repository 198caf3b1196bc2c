"""Scores an autoformalization model: Lean 3 compile rate, BLEU and ROUGE.

    python evaluate.py SUBMISSION TASK_ROOT OUT_JSON [--problems hub|FILE.jsonl]
        [--limit N] [--max-new-tokens N] [--lean-project DIR] [--lean-timeout S]

The submitted model (a `save_pretrained` folder) writes a formal Lean 3 statement
and proof for each held-out problem from its informal statement and proof, with
the prompt below, greedy decoding. An output counts as formalized when Lean 3,
run in a Lean 3 project that has mathlib (`--lean-project`, default
$LEAN_PROJECT), accepts it, followed by a check that it states the problem's
theorem: `example : ∀ BINDERS, TYPE := @NAME`, with the name, binders and type of
the reference's theorem, must type-check too (up to definitional equality, so
renamed variables and implicit binders pass). An empty or unrelated answer, which
Lean would accept, therefore fails. No error, no `sorry`, and none of `axiom`,
`constant`, `admit` or `add_decl`, which would prove anything, nor a notation
declaration, which could make the check's statement mean something else.

The answers are written to a temporary folder of their own (the Lean project may
be read-only); `lean` runs with the project as its working folder, where it finds
`leanpkg.path` and so mathlib. `lean` is $MLRA_COMMAND_LEAN where mlra resolved it
on the host (tasks/evaluators/host_tools.py), else the one on PATH. BLEU-4 (corpus,
smoothed) and ROUGE-1/2/L (F1, averaged over problems) compare the output with
the reference formal proof.

Score: the compile rate. Without Lean 3 or the project there is no score: the
script says so and exits with status 3 before loading the model. A problem whose
reference states no theorem this script can read is left out, and counted.
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
NO_PROJECT = (
    "no Lean 3 project: the compile rate cannot be measured. Give a Lean 3 mathlib "
    "project's folder (one with leanpkg.path) as --lean-project or $LEAN_PROJECT"
)
FORBIDDEN = re.compile(
    r"\b(?:sorry|admit|add_decl)\b"
    r"|^\s*(?:@\[[^\]]*\]\s*)?(?:(?:local|private|meta|protected)\s+)*"
    r"(?:axioms?|constants?|notation|infixl?|infixr|prefix|postfix)\b",
    re.MULTILINE,
)
"""What would let an answer prove anything, or change what the statement check means."""

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


def _top_level(text: str, start: int, target: str) -> int:
    """Where `target` first occurs at bracket depth 0 from `start`, or -1; a `:` that
    begins `:=` does not count as a `:`."""
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c in "([{⟨⦃":
            depth += 1
        elif c in ")]}⟩⦄":
            depth -= 1
        elif depth == 0 and text.startswith(target, i):
            if target != ":" or not text.startswith(":=", i):
                return i
        i += 1
    return -1


DECLARATION = re.compile(r"\b(?:theorem|lemma)\s+([^\s:({\[⦃]+)")


def statement(formal_proof: str, name: str | None = None) -> tuple[str, str] | None:
    """(name, the theorem's type as a Π-type) of the reference's theorem: the one named
    `name` where there is one, else the last; None where none can be read."""
    found = list(DECLARATION.finditer(formal_proof))
    if not found:
        return None
    chosen = next((m for m in found if m.group(1) == name), found[-1])
    colon = _top_level(formal_proof, chosen.end(), ":")
    if colon < 0:
        return None
    body = _top_level(formal_proof, colon + 1, ":=")
    if body < 0:
        return None
    binders = " ".join(formal_proof[chosen.end() : colon].split())
    typ = " ".join(formal_proof[colon + 1 : body].split())
    if not typ:
        return None
    return chosen.group(1), f"∀ {binders}, {typ}" if binders else typ


def checked_source(answer: str, target: tuple[str, str]) -> str:
    """The answer, then the check that it proves the reference's statement."""
    name, pi_type = target
    return f"{answer.rstrip()}\n\nexample : {pi_type} := @{name}\n"


def compiles(lean: str, project: Path, source: str, timeout: float, scratch: Path) -> bool:
    """Lean accepts `source` with no error and no `sorry`. The file goes to `scratch`
    (the project may be read-only); Lean runs in the project, to find its leanpkg.path."""
    if FORBIDDEN.search(source):
        return False
    fd, name = tempfile.mkstemp(suffix=".lean", dir=scratch)
    path = Path(name)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(source)
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


def lean_problem(lean: str | None, project: Path | None) -> str | None:
    """Why answers cannot be checked here, or None: Lean 3 must run, the project exist."""
    if lean is None:
        return NO_LEAN
    if project is None or not project.is_dir():
        return NO_PROJECT
    try:
        proc = subprocess.run(
            [lean, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{lean} does not run here: {exc}"
    if not re.search(r"Lean \(version 3\.", proc.stdout + proc.stderr):
        found = (proc.stdout + proc.stderr).strip().splitlines()[:1]
        return (
            f"{lean} is not Lean 3 ({found[0] if found else 'no version'}); the answers are Lean 3"
        )
    return None


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

    lean = os.environ.get("MLRA_COMMAND_LEAN") or shutil.which("lean")
    project_var = os.environ.get("LEAN_PROJECT")
    project = args.lean_project or (Path(project_var) if project_var else None)
    problem = lean_problem(lean, project)
    if problem is not None or lean is None or project is None:
        print(problem, file=sys.stderr)
        return 3
    problems = load_problems(args.problems, args.limit)
    targets = [statement(p["formal_proof"], p.get("name")) for p in problems]
    unread = sum(t is None for t in targets)
    kept = [(p, t) for p, t in zip(problems, targets, strict=True) if t is not None]
    if not kept:
        print("no reference states a theorem this script can read", file=sys.stderr)
        return 3
    problems = [p for p, _ in kept]
    outputs = generate(args.submission, problems, args.max_new_tokens)
    references = [p["formal_proof"] for p in problems]
    with tempfile.TemporaryDirectory(prefix="lean-answers-") as scratch:
        compiled = [
            compiles(lean, project, checked_source(o, t), args.lean_timeout, Path(scratch))
            for o, (_, t) in zip(outputs, kept, strict=True)
        ]
    scores = [rouge(o, r) for o, r in zip(outputs, references, strict=True)]
    metrics = {
        "compile_rate": sum(compiled) / len(compiled),
        "bleu": corpus_bleu(outputs, references),
        **{k: sum(s[k] for s in scores) / len(scores) for k in ("rouge1", "rouge2", "rougeL")},
        "problems": float(len(problems)),
        "unreadable_references": float(unread),
    }
    args.out.write_text(json.dumps({"score": metrics["compile_rate"], "metrics": metrics}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
