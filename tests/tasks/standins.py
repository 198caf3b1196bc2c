"""Stand-ins the tests and bench/gpu_check.py both build on the spot (no download): tiny
models from configs with a byte-level BPE tokenizer trained here, copies of the real
task folders whose lm-eval task names resolve to local YAML tasks (`dataset_path:
json`, data written here), and a stand-in Lean 3 toolchain. No pytest here: the GPU
check runs on machines that have the `ml` extra and not the test one."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from mlra.tasks.spec import BUILTIN_TASKS_DIR

SUPERGLUE = ["boolq", "cb", "copa", "multirc", "record", "sglue_rte", "wic", "wsc"]


def bpe_tokenizer(folder: Path) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    inner = Tokenizer(models.BPE())
    inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    inner.decoder = decoders.ByteLevel()
    text = [
        "The cat sat on the mat. Is it true? yes no maybe. theorem foo : 1 + 1 = 2 := by norm_num"
    ]
    inner.train_from_iterator(
        text * 4,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<eos>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=inner, eos_token="<eos>", pad_token="<eos>")
    tok.save_pretrained(folder)
    return tok


def save(model: Any, folder: Path, tokenizer: bool = True) -> Path:
    model.save_pretrained(folder)
    if tokenizer:
        bpe_tokenizer(folder)
    return folder


def llama(folder: Path, **overrides: Any) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config: dict[str, Any] = dict(
        vocab_size=300,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=0,
        bos_token_id=0,
        pad_token_id=0,
    )
    return save(LlamaForCausalLM(LlamaConfig(**(config | overrides))), folder)


def standin_copy(name: str, root: Path, *, evaluator_lines: str = "") -> Path:
    """The real task folder, copied, with offline resources and extra evaluator settings."""
    folder = root / name
    shutil.copytree(BUILTIN_TASKS_DIR / name, folder)
    toml = folder / "task.toml"
    text = toml.read_text()
    text = text.replace("network = true", "network = false")
    if evaluator_lines:
        text = text.replace("[evaluator.settings]\n", "[evaluator.settings]\n" + evaluator_lines)
    toml.write_text(text)
    return folder


def write_mc_task(
    folder: Path, task: str, *, metric: str = "acc", docs: int = 6, tag: str = ""
) -> None:
    rows = [
        {
            "text": f"Item {i}: the cat sat on the mat. Is it true?",
            "choices": ["yes", "no"],
            "label": i % 2,
        }
        for i in range(docs)
    ]
    (folder / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / f"{task}.yaml").write_text(
        f"task: {task}\n" + (f"tag: [{tag}]\n" if tag else "") + "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {task}.jsonl\n"
        "test_split: test\nfewshot_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "{{text}}"\ndoc_to_target: label\ndoc_to_choice: choices\n'
        f"metric_list:\n  - metric: {metric}\n    aggregation: {'f1' if metric == 'f1' else 'mean'}\n"
        "    higher_is_better: true\nmetadata:\n  version: 1.0\n"
    )


def superglue_standin(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for task in SUPERGLUE:
        write_mc_task(
            folder, task, metric="f1" if task == "record" else "acc", tag="super-glue-lm-eval-v1"
        )
    return folder


def group_standin(
    folder: Path, group: str, subtasks: dict[str, int], *, weight_by_size: bool
) -> Path:
    folder.mkdir(parents=True)
    for task, docs in subtasks.items():
        write_mc_task(folder, task, docs=docs)
    (folder / f"_{group}.yaml").write_text(
        f"group: {group}\ntask:\n"
        + "".join(f"  - {t}\n" for t in subtasks)
        + "aggregate_metric_list:\n  - metric: acc\n    aggregation: mean\n"
        f"    weight_by_size: {str(weight_by_size).lower()}\nmetadata:\n  version: 1.0\n"
    )
    return folder


STANDIN_LEAN = r"""
import json, os, re, sys

def top_level(text, start, target):
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c in "([{⟨⦃":
            depth += 1
        elif c in ")]}⟩⦄":
            depth -= 1
        elif depth == 0 and text.startswith(target, i) and not (
            target == ":" and text.startswith(":=", i)
        ):
            return i
    return -1

if sys.argv[1:] == ["--version"]:
    print("Lean (version 3.51.1, commit standin, Release)")
    sys.exit(0)
path = sys.argv[1]
text = open(path, encoding="utf-8").read()
log = os.environ.get("STANDIN_LEAN_LOG")
if log:
    with open(log, "a") as fh:
        fh.write(json.dumps({"cwd": os.getcwd(), "file": path}) + "\n")
errors = []
if re.search(r"^import ", text, re.M) and not os.path.exists("leanpkg.path"):
    errors.append((1, "file 'data.real.basic' not found in the LEAN_PATH"))
declared = {}
for m in re.finditer(r"\b(?:theorem|lemma)\s+(\S+)", text):
    colon = top_level(text, m.end(), ":")
    body = top_level(text, colon + 1, ":=")
    binders = " ".join(text[m.end():colon].split())
    typ = " ".join(text[colon + 1:body].split())
    declared[m.group(1)] = f"∀ {binders}, {typ}" if binders else typ
COMMANDS = ("import", "theorem", "lemma", "example", "open", "variables", "def", "begin",
            "end", "section", "namespace", "noncomputable", "universe", "@[", "--", "/-")
for n, line in enumerate(text.splitlines(), 1):
    if line.strip() and not line[0].isspace() and not line.startswith(COMMANDS):
        errors.append((n, f"unknown command '{line.split()[0]}'"))
for m in re.finditer(r"^example : (.*) := @(\S+)$", text, re.M):
    want, name = " ".join(m.group(1).split()), m.group(2)
    at = text.count("\n", 0, m.start()) + 1
    if name not in declared:
        errors.append((at, f"unknown identifier '{name}'"))
    elif declared[name] != want:
        errors.append((at, f"type mismatch, term @{name} has type {declared[name]}"))
if "FAIL" in text:
    errors.append((1, "tactic failed"))
for n, e in errors:
    print(f"{path}:{n}:0: error: {e}")
if "sorry" in text:
    print(f"{path}:1:0: warning: declaration uses sorry")
sys.exit(1 if errors else 0)
"""

REFERENCE = """import data.real.basic

theorem algebra_p1
  (x : ℝ)
  (h₀ : x + 1 = 3) :
  x = 2 :=
begin
  linarith,
end
"""


def lean_toolchain(root: Path) -> tuple[Path, Path]:
    """(the stand-in toolchain's `bin/lean`, a Lean project) under `root`, outside the
    system folders."""
    toolchain = root / "toolchains" / "lean-3.51.1"
    (toolchain / "lib" / "lean" / "library").mkdir(parents=True)
    (toolchain / "bin").mkdir()
    lean = toolchain / "bin" / "lean"
    lean.write_text(f"#!{sys.executable}\n{STANDIN_LEAN}")
    lean.chmod(0o755)
    project = root / "lean-project"
    project.mkdir()
    (project / "leanpkg.path").write_text("builtin_path\npath ./src\n")
    return lean, project


def graded_math_copy(tmp_path: Path, rows: list[dict[str, str]]) -> Path:
    folder = standin_copy("math-autoformalization", tmp_path)
    problems = folder / "hidden" / "problems.jsonl"
    problems.write_text("".join(json.dumps(r) + "\n" for r in rows))
    toml = folder / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            '"--problems", "hub", "--max-new-tokens", "768"',
            f'"--problems", "{problems}", "--max-new-tokens", "4"',
        )
    )
    return folder


TINY_REFERENCE = {
    "model_type": "phi",
    "vocab_size": 512,
    "hidden_size": 256,
    "intermediate_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "max_position_embeddings": 256,
}
"""The stand-in for Phi-2: the same architecture, small enough for a CPU."""


def tiny_phi(folder: Path, tokenizer: bool = True, **overrides: Any) -> Path:
    from transformers import PhiConfig, PhiForCausalLM

    config: dict[str, Any] = dict(
        vocab_size=512,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=256,
    )
    return save(PhiForCausalLM(PhiConfig(**(config | overrides))), folder, tokenizer)
