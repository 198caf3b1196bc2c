"""The lm-eval evaluator: EleutherAI's lm-evaluation-harness on a submitted model folder.

An offline task ships its lm-eval task YAMLs among its hidden files (local
`dataset_path: json` data, nothing from the Hub); a benchmark task names lm-eval's
own tasks (SuperGLUE, BLiMP, MMLU...), whose data comes from the Hugging Face Hub.
The submission is a folder written with `save_pretrained` (model and tokenizer)
that `AutoModelForCausalLM` loads without remote code. Settings, from
`[evaluator.settings]` in task.toml:

- `include`: folder of task YAMLs, relative to the task folder. Without it the
  tasks are lm-eval's built-in ones; with it only the folder's tasks are known.
- `tasks`: lm-eval task or group names to run (required).
- `primary`: "task/metric" whose value is the score, e.g. "tiny_lm_pairs/acc"
  (required); or a list of them, whose unweighted mean is the score (SuperGLUE
  is a tag, not a group, so lm-eval reports no average of its own). An entry may
  be a glob ("blimp_*/acc"); every metric it matches counts once.
- `num_fewshot` (default: each task's own), `limit` (examples per task, a count
  or a fraction; for trial runs, never for a real score).
- `batch_size` (default 16), `device` ("auto": cuda when available, else cpu),
  `dtype` (default "float32": reproducible on CPU; "auto" keeps the checkpoint's).
- `max_length_cap` (default 2048): longest scoring window. lm-eval scores long texts
  in windows of the model's context length; a config claiming a huge one would
  otherwise make it attend over whole chapters at once and run out of memory.
- `safetensors_only` (default true): weights must be safetensors, so grading never
  unpickles a file the agent wrote.
- `efficiency`: the Edge LLMs Challenge's score (tasks/evaluators/edge_efficiency.py):
  the primary accuracy combined with the model's throughput against an uncompressed
  reference measured on the same device, and a peak-memory limit; the score is
  then that combination, and the accuracy one of the metrics.
- `running_memory`: `{max_gb, sequence_length, batch_size}`: the model's memory while
  it runs, measured alone in a fresh process before lm-eval starts
  (tasks/evaluators/model_memory.py); over `max_gb` is a broken rule, and lm-eval
  does not run.
- `refuse_pretrained_tokenizer` (default false): a submitted tokenizer that is a known
  pretrained vocabulary (tasks/evaluators/known_tokenizers.py) breaks the rule "train
  only on the data provided", and lm-eval does not run.
- `primary_weighting` ("mean", the default, or "samples"): "samples" weights each
  primary entry by its task's number of examples, as lm-eval 0.4.0-0.4.2 averaged a
  group (the versions the benchmark's numbers were taken with).
- `also_report`: `{name: [task/metric...]}`: further unweighted means reported as
  metrics beside the score (mlra's own view, or the challenge's where mlra differs).
- `lossless_tokenizer_on`: a JSONL file (relative to the task folder) with a `text`
  field; the submitted tokenizer must give back that text, up to whitespace, when
  it decodes its own tokens. A lossy tokenizer (one that maps text to UNK, say)
  would make perplexity meaningless, so breaking this is a violation.

Everything the agent wrote except the model files is ignored, and no code from
the submission runs (`trust_remote_code=False`). lm-eval is imported inside
`evaluate`, so importing this module stays cheap.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlra.tasks.evaluators.base import EvalOutcome, Evaluator

PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


class LmEvalEvaluator(Evaluator):
    def check_format(self, artifact: Path) -> EvalOutcome:
        """A causal-LM folder transformers can load, weights as the task requires."""
        settings = self.task.evaluator.settings
        problem = check_artifact(
            artifact, safetensors_only=bool(settings.get("safetensors_only", True))
        )
        return EvalOutcome(ok=problem is None, error=problem)

    def evaluate(self, artifact: Path, *, work_dir: Path) -> EvalOutcome:
        settings = self.task.evaluator.settings
        problem = _settings_problem(settings)
        if problem:
            return EvalOutcome(ok=False, error=f"task error: {problem}")
        include: Path | None = None
        if settings.get("include"):
            include = (self.task.root / str(settings["include"])).resolve()
            if not include.is_dir():
                return EvalOutcome(
                    ok=False,
                    error=f"task error: lm-eval task folder {settings['include']} is missing",
                )

        problem = check_artifact(
            artifact, safetensors_only=bool(settings.get("safetensors_only", True))
        )
        if problem:
            return EvalOutcome(ok=False, error=problem)

        if not self.task.resources.network:
            for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
                os.environ.setdefault(name, "1")
        import torch
        import transformers

        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(
                str(artifact), trust_remote_code=False, local_files_only=True
            )
        except Exception as exc:
            return EvalOutcome(
                ok=False, error=f"the submitted tokenizer cannot be loaded: {_brief(exc)}"
            )
        if tokenizer.eos_token_id is None and tokenizer.bos_token_id is None:
            return EvalOutcome(
                ok=False,
                error="the submitted tokenizer has neither an eos nor a bos token; "
                "lm-eval needs one to start each text",
            )
        violations: list[str] = []
        check_file = settings.get("lossless_tokenizer_on")
        if check_file:
            violation = lossless_violation(tokenizer, self.task.root / str(check_file))
            if violation:
                violations.append(violation)

        if settings.get("refuse_pretrained_tokenizer"):
            from mlra.tasks.evaluators.known_tokenizers import pretrained_tokenizer_violation

            violation = pretrained_tokenizer_violation(tokenizer)
            if violation:
                return EvalOutcome(ok=False, violations=[*violations, violation])

        device = str(settings.get("device", "auto"))
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        memory_metrics: dict[str, float] = {}
        if settings.get("running_memory") is not None:
            from mlra.tasks.evaluators.model_memory import running_memory_rule

            try:
                memory_metrics, broken = running_memory_rule(
                    artifact, dict(settings["running_memory"]), device
                )
            except Exception as exc:
                return EvalOutcome(
                    ok=False,
                    error=f"the submission's memory while running could not be measured: {_brief(exc)}",
                )
            if broken:
                # A broken rule gets no score: hours of lm-eval would change nothing.
                return EvalOutcome(
                    ok=False, metrics=memory_metrics, violations=[*violations, broken]
                )
        model_args: dict[str, Any] = {
            "pretrained": str(artifact),
            "dtype": str(settings.get("dtype", "float32")),
            "trust_remote_code": False,
        }
        if settings.get("safetensors_only", True):
            model_args["use_safetensors"] = True
        cap = int(settings.get("max_length_cap", 2048))
        if _context_length(artifact) > cap:
            model_args["max_length"] = cap
        import lm_eval
        from lm_eval.evaluator import simple_evaluate
        from lm_eval.tasks import TaskManager

        if include is not None:
            tasks_dir = render_task_dir(
                include, work_dir / "lm_eval_tasks", cache_dir=work_dir / "hf_datasets"
            )
            manager = TaskManager(include_path=str(tasks_dir), include_defaults=False)
        else:
            manager = TaskManager()
        unknown = [t for t in settings["tasks"] if t not in manager.all_tasks]
        if unknown:
            return EvalOutcome(
                ok=False,
                error=f"task error: lm-eval {getattr(lm_eval, '__version__', '')} knows no task "
                f"named {', '.join(unknown)}",
            )

        started = time.monotonic()
        try:
            results = simple_evaluate(
                model="hf",
                model_args=model_args,
                tasks=list(settings["tasks"]),
                task_manager=manager,
                num_fewshot=_optional_int(settings.get("num_fewshot")),
                limit=settings.get("limit"),
                batch_size=int(settings.get("batch_size", 16)),
                device=device,
                log_samples=False,
                bootstrap_iters=0,
            )
        except Exception as exc:
            offline = offline_data_problem(exc)
            if offline:
                return EvalOutcome(ok=False, error=offline)
            return EvalOutcome(
                ok=False, error=f"lm-eval could not evaluate the submission: {_brief(exc)}"
            )
        if not results or "results" not in results:
            return EvalOutcome(ok=False, error="lm-eval returned no results")
        task_results = results["results"]

        metrics = flatten_metrics(task_results) | memory_metrics
        details: dict[str, object] = {
            "lm_eval_version": getattr(lm_eval, "__version__", "unknown"),
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "device": device,
            "dtype": model_args["dtype"],
            "tasks": list(settings["tasks"]),
            "results": {task: _plain(values) for task, values in task_results.items()},
            "n_samples": _plain(results.get("n-samples", {})),
            "max_length": _plain(results.get("max_length")),
            "seconds": round(time.monotonic() - started, 1),
        }
        if settings.get("num_fewshot") is not None:
            details["num_fewshot"] = settings["num_fewshot"]
        if settings.get("limit") is not None:
            details["limit"] = settings["limit"]
        sizes = (
            _sample_counts(results.get("n-samples"))
            if settings.get("primary_weighting") == "samples"
            else None
        )
        score, used, missing = primary_score(metrics, settings["primary"], sizes=sizes)
        if missing or score is None:
            return EvalOutcome(
                ok=False,
                metrics=metrics,
                error=f"task error: lm-eval reported no {', '.join(map(repr, missing))} "
                f"(it reported: {', '.join(sorted(metrics))})",
                details=details,
            )
        if len(used) > 1:
            details["primary_mean_of"] = used
        if sizes is not None:
            details["primary_weighted_by_samples"] = {k: sizes.get(k.split("/")[0]) for k in used}
        for name, entries in dict(settings.get("also_report") or {}).items():
            value, _, gaps = primary_score(metrics, list(entries))
            if value is not None and not gaps:
                metrics[str(name)] = value
        if settings.get("efficiency") is not None:
            from mlra.tasks.evaluators.edge_efficiency import score_efficiency

            details["accuracy"] = score
            try:
                score, more, broken = score_efficiency(
                    artifact, score, dict(settings["efficiency"]), device
                )
            except Exception as exc:
                return EvalOutcome(
                    ok=False,
                    metrics=metrics,
                    error=f"the throughput of the submission could not be measured: {_brief(exc)}",
                    details=details,
                )
            metrics |= more
            violations += broken
        return EvalOutcome(
            ok=True, score=score, metrics=metrics, violations=violations, details=details
        )


def _settings_problem(settings: dict[str, Any]) -> str | None:
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


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _sample_counts(n_samples: Any) -> dict[str, int]:
    """{task: examples scored} from lm-eval's "n-samples" ({"effective": n, ...})."""
    out: dict[str, int] = {}
    if isinstance(n_samples, dict):
        for task, counts in n_samples.items():
            n = counts.get("effective") if isinstance(counts, dict) else None
            if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                out[str(task)] = n
    return out


def primary_score(
    metrics: dict[str, float],
    primary: str | list[str],
    *,
    sizes: dict[str, int] | None = None,
) -> tuple[float | None, list[str], list[str]]:
    """(score, the metrics it averages, the entries that matched nothing).

    One "task/metric" is the score itself; a list is averaged without weights, as
    a benchmark that reports "the SuperGLUE average" means; a glob entry stands
    for every metric it matches. With `sizes` ({task: examples}), each metric
    counts by its task's examples, as lm-eval 0.4.0-0.4.2 averaged a group; a task
    without a count is then missing.
    """
    import fnmatch

    used: list[str] = []
    missing: list[str] = []
    for entry in primary if isinstance(primary, list) else [primary]:
        if any(c in entry for c in "*?["):
            hits = sorted(k for k in metrics if fnmatch.fnmatchcase(k, entry))
        else:
            hits = [entry] if entry in metrics else []
        if not hits:
            missing.append(entry)
        used += [h for h in hits if h not in used]
    if sizes is not None:
        missing += [k for k in used if k.split("/")[0] not in sizes]
    if missing or not used:
        return None, used, missing
    if sizes is not None:
        total = sum(sizes[k.split("/")[0]] for k in used)
        return sum(metrics[k] * sizes[k.split("/")[0]] for k in used) / total, used, missing
    return sum(metrics[k] for k in used) / len(used), used, missing


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
        return f"the submission's config cannot be loaded: {_brief(exc)}"
    if loaded.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return f"model type {loaded.model_type!r} is not a causal LM that AutoModelForCausalLM can load"
    return None


def _context_length(artifact: Path) -> int:
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


def flatten_metrics(results: Mapping[str, Mapping[str, object]]) -> dict[str, float]:
    """{"task/metric": value} for every finite numeric metric; stderr entries are left out.

    lm-eval keys metrics as "metric,filter"; the filter is dropped when it is "none".
    """
    metrics: dict[str, float] = {}
    for task, values in results.items():
        for key, value in values.items():
            if "," not in key or "_stderr" in key:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if not math.isfinite(float(value)):
                continue
            metric, _, filt = key.partition(",")
            metrics[f"{task}/{metric if filt == 'none' else key}"] = float(value)
    return metrics


def _plain(value: Any) -> Any:
    """JSON-safe copy (NaN and odd types as strings) for the outcome's details."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _brief(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}"
