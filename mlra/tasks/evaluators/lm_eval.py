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
`evaluate`, so importing this module stays cheap. What is checked before lm-eval
runs is in lm_eval_checks.py, how its results become a score in lm_eval_scores.py;
this module runs it. While it runs, a multiple-choice document whose top choices tie
counts as chance among them, where lm-eval gave the tie to the first choice (the right
one in BLiMP): choice_ties.py.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from mlra.tasks.evaluators.base import EvalOutcome, Evaluator
from mlra.tasks.evaluators.choice_ties import TIED_METRIC, chance_for_ties
from mlra.tasks.evaluators.lm_eval_checks import (
    brief,
    check_artifact,
    context_length,
    lossless_violation,
    offline_data_problem,
    render_task_dir,
    settings_problem,
)
from mlra.tasks.evaluators.lm_eval_scores import (
    flatten_metrics,
    plain,
    primary_score,
    sample_counts,
)
from mlra.tasks.evaluators.weight_checks import (
    load_failure,
    non_finite_weights,
    vocabulary_misfit,
    watch_likelihoods,
)


class LmEvalEvaluator(Evaluator):
    def check_format(self, artifact: Path) -> EvalOutcome:
        """A causal-LM folder transformers can load, weights as the task requires, every
        weight finite (a diverged run's NaN model is told now, not at the final grade)."""
        settings = self.task.evaluator.settings
        problem = check_artifact(
            artifact, safetensors_only=bool(settings.get("safetensors_only", True))
        ) or non_finite_weights(artifact)
        return EvalOutcome(ok=problem is None, error=problem)

    def evaluate(self, artifact: Path, *, work_dir: Path) -> EvalOutcome:
        settings = self.task.evaluator.settings
        problem = settings_problem(settings)
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
        say("loading torch, transformers and the submitted tokenizer")
        import torch
        import transformers

        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(
                str(artifact), trust_remote_code=False, local_files_only=True
            )
        except Exception as exc:
            return EvalOutcome(
                ok=False, error=f"the submitted tokenizer cannot be loaded: {brief(exc)}"
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

        say("checking the submitted weights for NaN and infinite values")
        non_finite = non_finite_weights(artifact)
        if non_finite:
            return EvalOutcome(ok=False, error=non_finite)
        device = str(settings.get("device", "auto"))
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        memory_metrics: dict[str, float] = {}
        if settings.get("running_memory") is not None:
            from mlra.tasks.evaluators.model_memory import running_memory_rule

            say("measuring the submission's memory while it runs (no count to show)")
            try:
                memory_metrics, broken = running_memory_rule(
                    artifact, dict(settings["running_memory"]), device
                )
            except Exception as exc:
                return EvalOutcome(
                    ok=False,
                    error=f"the submission's memory while running could not be measured: {brief(exc)}",
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
        if context_length(artifact) > cap:
            model_args["max_length"] = cap
        say("loading lm-eval and its tasks")
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

        show_lm_eval_steps()
        quiet_git_probe()
        started = time.monotonic()
        try:
            with watch_likelihoods() as likelihoods, chance_for_ties() as ties:
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
            why = vocabulary_misfit(exc, len(tokenizer), artifact) or load_failure(
                exc, artifact, transformers.AutoModelForCausalLM
            )
            return EvalOutcome(ok=False, error=f"lm-eval could not evaluate the submission: {why}")
        if not results or "results" not in results:
            return EvalOutcome(ok=False, error="lm-eval returned no results")
        if likelihoods.non_finite:
            return EvalOutcome(ok=False, error=likelihoods.problem(model_args["dtype"]))
        task_results = results["results"]
        say("lm-eval has finished; computing the score from its results")

        metrics = flatten_metrics(task_results) | memory_metrics
        details: dict[str, object] = {
            "lm_eval_version": getattr(lm_eval, "__version__", "unknown"),
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "device": device,
            "dtype": model_args["dtype"],
            "tasks": list(settings["tasks"]),
            "results": {task: plain(values) for task, values in task_results.items()},
            "n_samples": plain(results.get("n-samples", {})),
            "max_length": plain(results.get("max_length")),
            "seconds": round(time.monotonic() - started, 1),
        }
        if ties.tied:
            # A tie went to the first choice, the right one in BLiMP's layout: counted as
            # chance instead (tasks/evaluators/choice_ties.py), and said in the grade's
            # metrics (which its event records) as well as its details.
            metrics[TIED_METRIC] = float(sum(ties.tied.values()))
            details["tied_choices"] = ties.summary()
            for task, line in ties.summary().items():
                say(f"{task}: {line}")
        if settings.get("num_fewshot") is not None:
            details["num_fewshot"] = settings["num_fewshot"]
        if settings.get("limit") is not None:
            details["limit"] = settings["limit"]
        sizes = (
            sample_counts(results.get("n-samples"))
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
            say("measuring the submission's throughput (no count to show)")
            try:
                score, more, broken = score_efficiency(
                    artifact, score, dict(settings["efficiency"]), device
                )
            except Exception as exc:
                return EvalOutcome(
                    ok=False,
                    metrics=metrics,
                    error=f"the throughput of the submission could not be measured: {brief(exc)}",
                    details=details,
                )
            metrics |= more
            violations += broken
        return EvalOutcome(
            ok=True, score=score, metrics=metrics, violations=violations, details=details
        )


def say(line: str) -> None:
    """A step of the grading, in the evaluator's output, where the displays show it
    (tasks/evaluators/progress.py): a step with no progress bar says so rather than
    leave the last bar's count standing as if it were still moving."""
    print(line, file=sys.stderr, flush=True)


_STEPS_HANDLER = "mlra-lm-eval-steps"


def show_lm_eval_steps() -> None:
    """lm-eval's own log at INFO, on stderr: it says which task's requests it builds
    and which kind of request it runs ("Building contexts for blimp_x on rank 0...",
    "Running loglikelihood_rolling requests"), the names its unnamed progress bars take
    on the displays. Without a handler its INFO lines go nowhere."""
    logger = logging.getLogger("lm_eval")
    logger.setLevel(logging.INFO)
    # Once a process, to whatever stderr is now: a second grading in the same process
    # would otherwise print each line twice (and to a stderr that may have closed).
    for old in [h for h in logger.handlers if h.get_name() == _STEPS_HANDLER]:
        logger.removeHandler(old)
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_STEPS_HANDLER)
    handler.setFormatter(logging.Formatter("lm-eval: %(message)s"))
    logger.addHandler(handler)


def quiet_git_probe() -> None:
    """lm-eval asks `git describe` which commit its working folder is at, for its
    results' `git_hash`; the grader's folder is no repository, and git's answer on stderr
    (`Stopping at filesystem boundary (GIT_DISCOVERY_ACROSS_FILESYSTEM not set)`) became
    a line of the grading's output about nothing graded. mlra records no git hash: the
    probe is answered "none" without running git."""
    import lm_eval.evaluator

    if hasattr(lm_eval.evaluator, "get_git_commit_hash"):
        lm_eval.evaluator.get_git_commit_hash = lambda: None  # type: ignore[attr-defined]


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)
