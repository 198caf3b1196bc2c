"""The lm-eval evaluator's checks before lm-eval runs: the task's settings, the
submitted folder (a causal LM transformers loads, weights as safetensors, no remote
code), the tokenizer's round trip, the task YAMLs made runnable from any folder, and
the one line that says the data is not available offline.

Apart from tasks/evaluators/lm_eval.py, which runs lm-eval, so every refusal a user
can meet before hours of scoring reads in one place; each answers in words, not with
a traceback. Heavy imports (transformers, yaml) stay inside the functions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


def settings_problem(settings: dict[str, Any]) -> str | None:
    for key in ("tasks", "primary"):
        if not settings.get(key):
            return f"evaluator.settings.{key} is not set"
    if not isinstance(settings["tasks"], list) or not all(
        isinstance(t, str) for t in settings["tasks"]
    ):
        return "evaluator.settings.tasks must be a list of lm-eval task names"
    primary = settings["primary"]
    entries = primary if isinstance(primary, list) else [primary]
    if not entries or not all(isinstance(p, str) and "/" in p for p in entries):
        return "evaluator.settings.primary must read 'task/metric' (or be a list of them)"
    if settings.get("efficiency") is not None:
        from pydantic import ValidationError

        from mlra.tasks.evaluators.edge_efficiency import EfficiencySettings

        try:
            EfficiencySettings.model_validate(settings["efficiency"])
        except ValidationError as exc:
            return f"evaluator.settings.efficiency: {exc.errors()[0]['msg']}"
    memory = settings.get("running_memory")
    if memory is not None:
        limit = memory.get("max_gb") if isinstance(memory, dict) else None
        if isinstance(limit, bool) or not isinstance(limit, int | float) or limit <= 0:
            return "evaluator.settings.running_memory needs max_gb, a positive number of GB"
    if settings.get("primary_weighting", "mean") not in ("mean", "samples"):
        return 'evaluator.settings.primary_weighting must be "mean" or "samples"'
    also = settings.get("also_report")
    if also is not None and (
        not isinstance(also, dict)
        or not all(
            isinstance(v, list) and v and all("/" in str(e) for e in v) for v in also.values()
        )
    ):
        return "evaluator.settings.also_report must map names to lists of 'task/metric'"
    fewshot = settings.get("num_fewshot")
    if fewshot is not None and (
        isinstance(fewshot, bool) or not isinstance(fewshot, int) or fewshot < 0
    ):
        return "evaluator.settings.num_fewshot must be a whole number >= 0"
    limit = settings.get("limit")
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int | float) or limit <= 0
    ):
        return "evaluator.settings.limit must be a positive count or fraction"
    return None


OFFLINE_VARIABLES = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")


def offline_data_problem(exc: BaseException) -> str | None:
    """One line for "the data is on the Hub, and this process may not fetch it".

    `datasets` raises a ConnectionError ("Couldn't reach 'aps/super_glue' on the
    Hub (OfflineModeIsEnabled)") from deep inside lm-eval's task loading; the
    user needs the dataset's name and what to do, not the traceback.
    """
    import re

    offline = [
        v for v in OFFLINE_VARIABLES if os.environ.get(v, "").lower() in {"1", "true", "yes", "on"}
    ]
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    text = " ".join(f"{type(e).__name__}: {e}" for e in chain)
    is_offline = "OfflineModeIsEnabled" in text or (
        offline
        and any(
            isinstance(e, ConnectionError) or "LocalEntryNotFound" in type(e).__name__
            for e in chain
        )
    )
    if not is_offline:
        return None
    found = re.search(r"reach '([^']+)'", text) or re.search(
        r"Dataset '?([\w./-]+)'? is not cached", text
    )
    dataset = f"dataset {found.group(1)!r}" if found else "its dataset"
    setting = " and ".join(f"{v}=1" for v in offline) or "offline mode"
    return (
        f"the lm-eval data is not available offline: {dataset} is not in the Hugging Face "
        f"cache and {setting} is set; run where huggingface.co is reachable, or download "
        "the dataset into the cache (HF_HOME) first"
    )


def check_artifact(artifact: Path, *, safetensors_only: bool = True) -> str | None:
    """Why `artifact` is not a loadable causal-LM folder, in words; None when it looks fine.

    Cheap checks first, so that a missing or malformed submission gets a clear
    answer instead of a traceback from deep inside transformers.
    """
    name = artifact.name or str(artifact)
    if not artifact.exists():
        return f"nothing was submitted: {name} does not exist"
    if not artifact.is_dir():
        return f"the submission {name} is a file, not a folder saved with save_pretrained"
    config_path = artifact / "config.json"
    if not config_path.is_file():
        return f"the submission {name} has no config.json (save the model with save_pretrained)"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        return f"the submission's config.json is not valid JSON: {exc}"
    if not isinstance(config, dict):
        return "the submission's config.json is not a JSON object"
    if "auto_map" in config:
        return "the submission's config.json asks for remote code (auto_map); only built-in transformers architectures are evaluated"
    safetensors = list(artifact.glob("*.safetensors"))
    if not safetensors:
        pickled = [p.name for pattern in PICKLED_WEIGHTS for p in artifact.glob(pattern)]
        if pickled and safetensors_only:
            return (
                f"the submission's weights are pickled ({', '.join(sorted(pickled))}); "
                "save them as safetensors (save_pretrained's default)"
            )
        if not pickled:
            return f"the submission {name} holds no model weights (*.safetensors)"
    try:
        from transformers import AutoConfig
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        loaded = AutoConfig.from_pretrained(
            str(artifact), trust_remote_code=False, local_files_only=True
        )
    except Exception as exc:
        return f"the submission's config cannot be loaded: {brief(exc)}"
    if loaded.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return f"model type {loaded.model_type!r} is not a causal LM that AutoModelForCausalLM can load"
    return None


def context_length(artifact: Path) -> int:
    """The context length the config claims, under the names lm-eval looks for (0: none)."""
    config = json.loads((artifact / "config.json").read_text(encoding="utf-8"))
    nested = config.get("text_config")
    nested = nested if isinstance(nested, dict) else {}
    for key in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = nested.get(key, config.get(key))
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def lossless_violation(tokenizer: Any, path: Path) -> str | None:
    """A violation when the tokenizer cannot give back the texts in `path` (up to whitespace)."""
    with open(path, encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh if line.strip()]
    for index, text in enumerate(texts):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        back = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if back.split() != text.split():
            want, got = text.split(), back.split()
            at = next(
                (i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b),
                min(len(want), len(got)),
            )
            return (
                "the tokenizer is not lossless: decoding its tokens does not give back the text "
                f"(document {index}, word {at}: {' '.join(want[at : at + 3])!r} came back as "
                f"{' '.join(got[at : at + 3])!r}); perplexity and pair scores would be meaningless"
            )
    return None


def render_task_dir(source: Path, target: Path, *, cache_dir: Path) -> Path:
    """Copy the task YAMLs to `target` with data paths made absolute.

    lm-eval hands `dataset_kwargs.data_files` to `datasets.load_dataset`, which
    resolves relative paths against the current directory; the task YAMLs name
    them relative to their own folder, so they work the same from any cwd. The
    dataset cache goes to `cache_dir` (scratch), not the user's home.
    """
    import shutil

    import yaml

    if target.exists():
        shutil.rmtree(target)
    for path in sorted(source.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(source)
        out = target / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        text = (
            path.read_text(encoding="utf-8")
            if path.suffix in {".yaml", ".yml"} or path.name.endswith("_yaml")
            else None
        )
        if text is None:
            out.write_bytes(path.read_bytes())
            continue
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            doc = None  # custom tags such as !function: leave the file as it is
        if isinstance(doc, dict) and isinstance(doc.get("dataset_kwargs"), dict):
            kwargs = doc["dataset_kwargs"]
            if "data_files" in kwargs:
                kwargs["data_files"] = _absolute(kwargs["data_files"], path.parent)
            kwargs.setdefault("cache_dir", str(cache_dir))
            text = yaml.safe_dump(doc, sort_keys=False)
        out.write_text(text, encoding="utf-8")
    return target


def _absolute(files: Any, base: Path) -> Any:
    if isinstance(files, str):
        return (
            files if "://" in files or Path(files).is_absolute() else str((base / files).resolve())
        )
    if isinstance(files, list):
        return [_absolute(f, base) for f in files]
    if isinstance(files, dict):
        return {k: _absolute(v, base) for k, v in files.items()}
    return files


def brief(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}"
