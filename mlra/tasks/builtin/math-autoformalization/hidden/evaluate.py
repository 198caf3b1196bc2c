"""Scores an autoformalization model: Lean 3 compile rate, BLEU and ROUGE.

    python evaluate.py SUBMISSION TASK_ROOT OUT_JSON [--problems hub|FILE.jsonl]
        [--limit N] [--max-new-tokens N] [--lean-project DIR] [--lean-timeout S]
        [--lean-budget S] [--lean-workers N]

The submitted model (a `save_pretrained` folder) writes a formal Lean 3 statement
and proof for each held-out problem from the fields a row of the challenge's data
gives as input (the theorem's `name`, its informal statement and proof; the
`formal_proof` is the answer to find), with the prompt below, greedy decoding. An
output counts as formalized when Lean 3, run in a Lean 3 project that has mathlib
(`--lean-project`, default $LEAN_PROJECT), accepts it, followed by a check that it
states the problem's theorem: `example : ∀ BINDERS, TYPE := @NAME`, with the
binders and type of the reference's theorem, must type-check too (up to
definitional equality, so renamed variables and implicit binders pass). NAME is
the problem's name where the answer declares a theorem of that name, else the last
theorem or lemma the answer declares: a right statement under another name counts.
An empty or unrelated answer, which Lean would accept, therefore fails.

Refused before Lean (`refusal`, each with its reason): what proves anything without
a proof (`sorry`, `admit`, axioms, constants), what stops Lean before the check
(`#exit`, an unterminated comment), meta code that can add declarations or axioms
no keyword shows (`meta`, `run_cmd`, `#eval`, environment and declaration
primitives), and what can change what the check's statement means (notation,
`localized` notation, precedence, instances, aliases, and a definition of a name
the reference's statement uses). Comments are not read for these words.

The answers are written to a temporary folder of their own (the Lean project may
be read-only); `lean` runs with the project as its working folder, where it finds
`leanpkg.path` and so mathlib. `lean` is $MLRA_COMMAND_LEAN where mlra resolved it
on the host (tasks/evaluators/host_tools.py), else the one on PATH. BLEU-4 (corpus,
smoothed) and ROUGE-1/2/L (F1, averaged over problems) compare the output with
the reference formal proof.

Time: the model has `--generate-budget` seconds (3.5 h, loading included) for all
its answers; each answer stops at what is left of it (`max_time`) and a problem not
reached by then gets no answer (not compiled; counted as `unanswered_in_time`).
Then `--lean-workers` Lean processes check the answers at once (default: the CPUs
this process may use, at most 8), each answer given at most `--lean-timeout`
seconds (120) and less where needed for every answer's worst case to fit
`--lean-budget` (2 h): ceil(problems / workers) * limit <= budget. So the ~199
held-out problems take at most 2 h of Lean on one CPU (36 s each) and about 50 min
on 8; 3.5 h + 2 h leaves half an hour of the task's 6 h evaluator time-out for
reading the data and the rest. An answer that runs out of time is not compiled.

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
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROMPT = (
    "Theorem name: {name}\n\n"
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
_COMMAND = r"^\s*(?:@\[[^\]]*\]\s*)?(?:(?:local|private|protected|noncomputable|meta)\s+)*"
REFUSED: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.MULTILINE), why)
    for pattern, why in (
        (r"\b(?:sorry|admit)\b", "`sorry` or `admit`: a proof left out"),
        (
            _COMMAND + r"(?:axioms?|constants?)\b",
            "an axiom or constant: a statement taken without proof",
        ),
        (
            r"#exit\b",
            "`#exit`: Lean stops reading there, so the statement check after the answer never runs",
        ),
        (
            r"\b(?:meta|run_cmd|add_decl|set_env|updateex_env|add_meta_definition|environment"
            r"|declaration|vm_override|unsafe_run_io|user_command)\b|#eval\b",
            "meta code (`meta`, `run_cmd`, `#eval`, the environment's primitives): it can add "
            "axioms or declarations that no keyword shows",
        ),
        (
            _COMMAND + r"(?:notation|infixl?|infixr|prefix|postfix|precedence|reserve)\b"
            r"|\blocalized\b",
            "a notation, precedence or `localized` declaration: it can change what the check's "
            "statement parses to",
        ),
        (
            r"\binstance\b",
            "an instance or instance attribute: it can change what the check's numerals and "
            "operators mean",
        ),
        (
            _COMMAND + r"(?:parameters?|include)\b",
            "a section `parameter` or `include`: the check after the answer would take the "
            "section's hypotheses too, so a theorem that needs an extra one would pass",
        ),
        (
            r"\b(?:export|renaming)\b",
            "an alias (`export`, `open ... (renaming ...)`): a name in the check's statement "
            "could then stand for another constant",
        ),
    )
)
"""Refused before Lean: what would let an answer prove anything, stop Lean before the
statement check, or change what the check's statement means. Lean 4's meta syntax
(`macro`, `elab`, `syntax`, `open ... in`, `@[implemented_by]`, `unsafe`, `@[extern]`)
is not Lean 3 and fails to parse there, so it needs no entry of its own."""

CLASSICAL = re.compile(
    r"^\s*(?:local\s+)?attribute\s+\[instance(?:,\s*priority\s+\d+)?\]\s+"
    r"classical\.(?:prop_decidable|dec|dec_eq|dec_pred|dec_rel)\s*$",
    re.MULTILINE,
)
"""The one instance attribute honest Lean 3 proofs use (classical decidability, as
`open_locale classical` gives): decidable instances are subsingletons, so it cannot
change what a statement means. Not refused."""

DEFINITION = re.compile(
    _COMMAND
    + r"(?:def|definition|abbreviation|irreducible_def|structure|class|inductive)\s+([^\s:({\[⦃]+)",
    re.MULTILINE,
)
IDENTIFIER = re.compile(r"[\w.'!?]+")


def without_comments(text: str) -> str | None:
    """`text` with its `--` and (nested) `/- -/` comments blanked, or None where a block
    comment is never closed: then the check after the answer would be read as comment."""
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(text):
        if text.startswith("/-", i):
            depth += 1
            i += 2
        elif depth and text.startswith("-/", i):
            depth -= 1
            i += 2
            out.append(" ")
        elif depth:
            i += 1
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        else:
            out.append(text[i])
            i += 1
    return None if depth else "".join(out)


def refusal(answer: str, reference_type: str | None = None) -> str | None:
    """Why the answer is refused before Lean runs it, or None. `reference_type` is the
    check's statement: the answer may not define a name it uses (a `def prime` of its
    own would make `prime p` in the check mean that)."""
    code = without_comments(answer)
    if code is None:
        return "an unterminated comment: the statement check after it would be read as comment"
    code = CLASSICAL.sub("", code)
    for pattern, why in REFUSED:
        if pattern.search(code):
            return why
    if reference_type is not None:
        used = {word.rsplit(".", 1)[-1] for word in IDENTIFIER.findall(reference_type)}
        for m in DEFINITION.finditer(code):
            if m.group(1).rsplit(".", 1)[-1] in used:
                return (
                    f"a definition of `{m.group(1)}`, a name the problem's statement uses: "
                    "the check's statement would then mean the answer's definition"
                )
    return None


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


def generate(
    model_dir: Path,
    problems: list[dict[str, str]],
    max_new_tokens: int,
    budget: float | None = None,
) -> list[str | None]:
    """The model's answer to each problem, greedy. With a `budget` (seconds, loading
    included) no answer runs past it (`max_time`), and the problems it never reaches
    get None: a slow model costs its own score, never the whole grade's time-out."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.monotonic()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, trust_remote_code=False, use_safetensors=True, torch_dtype="auto"
    ).to(device)
    model.eval()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    outputs: list[str | None] = []
    for problem in problems:
        left = None if budget is None else budget - (time.monotonic() - start)
        if left is not None and left <= 0:
            outputs.append(None)
            continue
        prompt = PROMPT.format(**problem)
        ids = tokenizer(prompt, return_tensors="pt").to(device)
        with torch.no_grad():
            out = model.generate(
                **ids,
                max_new_tokens=max_new_tokens,
                max_time=left,
                do_sample=False,
                pad_token_id=pad,
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


def answer_theorem(answer: str, name: str) -> str:
    """The theorem the check applies to: the problem's `name` where the answer declares
    it, else the last theorem or lemma it declares (a right statement under another
    name counts), else `name` (then Lean says it is unknown)."""
    declared = [m.group(1) for m in DECLARATION.finditer(without_comments(answer) or "")]
    if name in declared or not declared:
        return name
    return declared[-1]


def checked_source(answer: str, target: tuple[str, str]) -> str:
    """The answer, then the check that it proves the reference's statement."""
    name, pi_type = target
    return f"{answer.rstrip()}\n\nexample : {pi_type} := @{answer_theorem(answer, name)}\n"


STATEMENT_CHECK = "the statement check: "
"""How a verdict begins where Lean accepts the answer itself and only the check after
it fails: the answer compiles but states another theorem (or none)."""


def lean_verdict(
    lean: str,
    project: Path,
    source: str,
    timeout: float,
    scratch: Path,
    check_line: int | None = None,
) -> str | None:
    """None where Lean accepts `source` with no error and no `sorry`, else why not; where
    every error is at or after `check_line` (the statement check's), the verdict begins
    with STATEMENT_CHECK. The file goes to `scratch` (the project may be read-only);
    Lean runs in the project, to find its leanpkg.path."""
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
        return f"Lean ran out of its {timeout:.0f} s"
    finally:
        path.unlink(missing_ok=True)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0 or "error" in log:
        errors = [x for x in log.splitlines() if "error" in x]
        first = (errors or [f"exit {proc.returncode}"])[0].replace(str(path), "answer.lean")
        at = re.compile(re.escape(str(path)) + r":(\d+):\d+: error")
        lines = [at.match(x) for x in errors]
        if (
            check_line is not None
            and errors
            and all(m is not None and int(m.group(1)) >= check_line for m in lines)
        ):
            return STATEMENT_CHECK + first[:300]
        return "Lean: " + first[:300]
    if "sorry" in log:
        return "Lean: the answer uses sorry"
    return None


def judge(
    lean: str, project: Path, answer: str, target: tuple[str, str], timeout: float, scratch: Path
) -> str | None:
    """None where the answer states and proves the problem's theorem, else why not."""
    refused = refusal(answer, target[1])
    if refused is not None:
        return "refused: " + refused
    source = checked_source(answer, target)
    check_line = source.count("\n")  # the check is the last line, which ends the file
    return lean_verdict(lean, project, source, timeout, scratch, check_line)


def lean_accepts_answer(verdict: str | None) -> bool:
    """Lean accepts the answer on its own (MLRB's "Lean 3 that compiled"), whether or
    not it states the problem's theorem."""
    return verdict is None or verdict.startswith(STATEMENT_CHECK)


def compiles(lean: str, project: Path, source: str, timeout: float, scratch: Path) -> bool:
    """Lean accepts `source` (an answer with its check) and nothing in it is refused."""
    if refusal(source) is not None:
        return False
    return lean_verdict(lean, project, source, timeout, scratch) is None


def lean_plan(problems: int, workers: int, timeout: float, budget: float) -> float:
    """Seconds each answer may take so that the worst case, every answer running out of
    time, `workers` at once, fits `budget`: ceil(problems / workers) * limit <= budget."""
    rounds = -(-problems // max(workers, 1))
    return min(timeout, budget / max(rounds, 1))


def default_workers() -> int:
    """The CPUs this process may use, at most 8 (each Lean holds mathlib in memory)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


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
    parser.add_argument("--lean-budget", type=float, default=7200)
    parser.add_argument("--lean-workers", type=int, default=None)
    parser.add_argument("--generate-budget", type=float, default=12600)
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
    generated = generate(args.submission, problems, args.max_new_tokens, args.generate_budget)
    outputs = [o or "" for o in generated]
    references = [p["formal_proof"] for p in problems]
    workers = args.lean_workers or default_workers()
    limit = lean_plan(len(problems), workers, args.lean_timeout, args.lean_budget)
    with tempfile.TemporaryDirectory(prefix="lean-answers-") as scratch:

        def one(item: tuple[str, tuple[str, str]]) -> str | None:
            return judge(lean, project, item[0], item[1], limit, Path(scratch))

        with ThreadPoolExecutor(max_workers=workers) as pool:
            verdicts = list(pool.map(one, zip(outputs, [t for _, t in kept], strict=True)))
    for p, why in zip(problems, verdicts, strict=True):
        print(f"{p.get('name', '?')}: {why or 'states and proves the theorem'}", file=sys.stderr)
    compiled = [v is None for v in verdicts]
    scores = [rouge(o, r) for o, r in zip(outputs, references, strict=True)]
    metrics = {
        "compile_rate": sum(compiled) / len(compiled),
        "bleu": corpus_bleu(outputs, references),
        **{k: sum(s[k] for s in scores) / len(scores) for k in ("rouge1", "rouge2", "rougeL")},
        "problems": float(len(problems)),
        "unreadable_references": float(unread),
        "lean_accepts_rate": sum(map(lean_accepts_answer, verdicts)) / len(verdicts),
        "unanswered_in_time": float(sum(o is None for o in generated)),
        "refused_answers": float(sum(bool(v and v.startswith("refused: ")) for v in verdicts)),
        "lean_timeouts": float(sum(bool(v and v.startswith("Lean ran out")) for v in verdicts)),
        "lean_seconds_per_answer": limit,
        "lean_workers": float(workers),
    }
    args.out.write_text(json.dumps({"score": metrics["compile_rate"], "metrics": metrics}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
