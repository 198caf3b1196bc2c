"""The rules a submitted model must keep, checked before it is scored.

Benchmarks of this kind set hard limits: at most so many parameters, a model
that loads in 1 GB or 12 GB, no quantized weights (compression by structure
only), a base model from an approved list. A submission that breaks one gets no
score, and the report says which rule and by how much.

Everything is read from the files, never by running the submission's code:
safetensors headers give every tensor's dtype and shape, so parameters and the
memory needed to load them are counted exactly without loading a byte of
weights; `config.json` gives the architecture. The submission is the agent's, so
its folder is walked without recursion or following links (tools/sandbox/trees.py)
and every read is bounded: a header or a config.json larger than any real one is
a broken rule, not a way to exhaust the grader's memory.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlra.tasks.model_identity import RefusedModel, declared_names, refused_evidence
from mlra.tasks.training_traces import training_traces
from mlra.tools.sandbox import trees

DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1,
}  # fmt: skip
QUANTIZED_DTYPES = {"I8", "U8", "I16", "U16", "I32", "U32", "F8_E4M3", "F8_E5M2"}
"""Integer or 8-bit float weights: what quantization leaves behind (ids and masks are
not weights, hence the name filter below)."""
QUANTIZED_NAME_PARTS = (
    "qweight",
    "qzeros",
    "g_idx",
    ".scales",
    "weight_scale",
    ".SCB",
    "absmax",
    "quant_map",
)
QUANTIZED_FILES = ("*.gguf", "*.ggml", "*.awq", "*.gptq")
MAX_CONFIG_BYTES = 16 * 1024 * 1024
"""A config.json larger than this is refused unread (real ones are kilobytes)."""
MAX_HEADER_BYTES = 100_000_000
"""The safetensors format's own bound on a header."""
MAX_ENTRIES = 1_000_000
"""Entries of a submitted folder looked at; more is refused."""
NOT_WEIGHTS = (
    "position_ids",
    "attention_mask",
    "causal_mask",
    "masked_bias",
    ".bias_mask",
    "inv_freq",
)


class ArchitectureFingerprint(BaseModel):
    """The shape of an approved base model, as its config.json gives it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    model_type: str
    """The config's `model_type`; "*" any model type (a rule that allows every family of
    a size class, with exceptions listed beside it)."""
    hidden_size: int | None = None
    num_hidden_layers: int | None = None
    vocab_size: int | None = None
    max_parameters: int | None = Field(default=None, gt=0)
    """A limit for this family alone: where a rule names a size class ("up to 8B"),
    a family whose allowed model counts more by its embedding (Gemma-7B: 8.54B) gets
    that model's size, so the list of allowed models and the size rule agree."""


class Constraints(BaseModel):
    """`[constraints]` in task.toml; every field optional."""

    model_config = ConfigDict(extra="forbid")

    # Limits of 0 or less would refuse every model (or, at 0, silently none): refused.
    max_parameters: int | None = Field(default=None, gt=0)
    max_load_memory_gb: float | None = Field(default=None, gt=0)
    """Memory the weights take once loaded, at the dtypes they are stored in."""
    forbid_quantized: bool = False
    require_safetensors: bool = False
    allowed_base_models: list[ArchitectureFingerprint] = Field(default_factory=list)
    """The submission's config must match one of these architectures."""
    min_layers_kept: int | None = Field(default=None, gt=0)
    refused_models: list[RefusedModel] = Field(default_factory=list)
    """Checkpoints refused though their architecture is allowed (RefusedModel)."""
    instruction_tuned_names: str | None = None
    """A regular expression (case-insensitive): a submission whose files name a checkpoint
    matching it (config.json's `_name_or_path`, written by transformers before 5.0; a
    model card's `base_model:`) started from an instruction-tuned model, where only base
    models are allowed. A name can be removed, so this refuses only what the files say."""

    @field_validator("instruction_tuned_names")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value

    allowed_dtypes: list[str] = Field(default_factory=list)
    """Safetensors dtypes the weights may be stored in ("F16", "F32"): a challenge that
    says "FP16 or FP32" refuses BF16 and F64 as well as quantized weights."""
    forbid_training_files: bool = False
    """No training allowed: refuse what training leaves in the folder (tasks/training_traces.py)."""

    @field_validator("allowed_dtypes")
    @classmethod
    def _dtypes(cls, value: list[str]) -> list[str]:
        # A name safetensors never writes ("FP16") would refuse every submission.
        unknown = [d for d in value if d not in DTYPE_BYTES]
        if unknown:
            raise ValueError(
                f"{', '.join(map(repr, unknown))} is not a safetensors dtype "
                f"(one of {', '.join(DTYPE_BYTES)})"
            )
        return value

    def active(self) -> bool:
        return any(
            [
                self.max_parameters,
                self.max_load_memory_gb,
                self.forbid_quantized,
                self.require_safetensors,
                self.allowed_base_models,
                self.min_layers_kept,
                self.refused_models,
                self.instruction_tuned_names,
                self.allowed_dtypes,
                self.forbid_training_files,
            ]
        )


@dataclass
class TensorInfo:
    name: str
    dtype: str
    shape: list[int]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES.get(self.dtype, 4)


class UnreadableWeights(Exception):
    pass


def read_safetensors_header(path: Path) -> list[TensorInfo]:
    """The tensors a safetensors file declares, from its header alone."""
    try:
        with open(path, "rb") as f:
            raw_len = f.read(8)
            if len(raw_len) != 8:
                raise UnreadableWeights(f"{path.name} is not a safetensors file (too short)")
            (length,) = struct.unpack("<Q", raw_len)
            if length <= 0 or length > MAX_HEADER_BYTES:
                raise UnreadableWeights(
                    f"{path.name} is not a safetensors file (bad header length)"
                )
            raw = f.read(length)
    except OSError as exc:
        raise UnreadableWeights(f"{path.name} cannot be read: {exc.strerror or exc}") from None
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise UnreadableWeights(f"{path.name} is not a safetensors file (bad header)") from None
    if not isinstance(header, dict):
        raise UnreadableWeights(f"{path.name} is not a safetensors file (bad header)")
    tensors = []
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        tensors.append(TensorInfo(name, str(info.get("dtype")), list(info.get("shape") or [])))
    return tensors


def _entries(model_dir: Path) -> list[tuple[str, bool]]:
    """(path relative to the folder, whether it is a folder) of everything in it, walked
    without recursion and without following links."""
    try:
        root = os.open(model_dir, trees.DIR_FLAGS)
    except OSError as exc:
        raise UnreadableWeights(f"{model_dir.name} cannot be read: {exc.strerror or exc}") from None
    stats = trees.WalkStats()
    try:
        found = [(e.rel, e.is_dir) for e in trees.walk(root, max_entries=MAX_ENTRIES, stats=stats)]
    finally:
        os.close(root)
    if stats.truncated:
        raise UnreadableWeights(
            f"{model_dir.name} holds more than {MAX_ENTRIES:,} files and folders"
        )
    return found


def _matching(
    entries: list[tuple[str, bool]], patterns: tuple[str, ...], *, files_only: bool = False
) -> list[str]:
    """The paths whose name matches a pattern, as `Path.rglob(pattern)` finds them."""
    return sorted(
        rel
        for rel, is_dir in entries
        if not (files_only and is_dir)
        and any(fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], p) for p in patterns)
    )


def _read_config(path: Path) -> dict[str, Any]:
    """config.json's object, or {} where there is none or it is not JSON; a file too
    large for any real config is refused (it could hide a quantization_config)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return {}
    try:
        data = trees.read_bounded(fd, MAX_CONFIG_BYTES)
    except trees.TooLarge as exc:
        raise UnreadableWeights(
            f"config.json holds {exc.size:,} bytes, more than the {MAX_CONFIG_BYTES:,} read at most"
        ) from None
    except OSError:
        return {}
    finally:
        os.close(fd)
    try:
        config = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return {}
    return config if isinstance(config, dict) else {}


@dataclass
class ModelFacts:
    parameters: int
    load_bytes: int
    dtypes: dict[str, int]
    quantized_tensors: list[str]
    config: dict[str, Any]
    pickled: list[str]
    quantized_files: list[str]


def model_facts(model_dir: Path) -> ModelFacts:
    """What the rules are checked against, read from the files."""
    config_path = model_dir / "config.json"
    config: dict[str, Any] = _read_config(config_path) if config_path.is_file() else {}
    entries = _entries(model_dir)
    safetensors = [model_dir / r for r in _matching(entries, ("*.safetensors",), files_only=True)]
    pickled = [
        model_dir / r
        for r in _matching(entries, ("*.bin", "*.pt", "*.pth", "*.ckpt"), files_only=True)
    ]
    params = 0
    load = 0
    dtypes: dict[str, int] = {}
    quantized: list[str] = []
    for file in safetensors:
        for tensor in read_safetensors_header(file):
            if any(part in tensor.name for part in NOT_WEIGHTS):
                continue
            params += tensor.numel
            load += tensor.nbytes
            dtypes[tensor.dtype] = dtypes.get(tensor.dtype, 0) + tensor.numel
            if tensor.dtype in QUANTIZED_DTYPES or any(
                p in tensor.name for p in QUANTIZED_NAME_PARTS
            ):
                quantized.append(f"{tensor.name} ({tensor.dtype})")
    quant_files = _matching(entries, QUANTIZED_FILES)
    return ModelFacts(
        parameters=params,
        load_bytes=load,
        dtypes=dtypes,
        quantized_tensors=quantized,
        config=config,
        pickled=[str(p.relative_to(model_dir)) for p in pickled],
        quantized_files=quant_files,
    )


def _gb(n: float) -> str:
    return f"{n / 1e9:.3g} GB"


def _count(n: int) -> str:
    return f"{n / 1e9:.3g}B" if n >= 1e9 else f"{n / 1e6:.3g}M" if n >= 1e6 else f"{n:,}"


def check(model_dir: Path, rules: Constraints) -> tuple[list[str], dict[str, Any]]:
    """The rules `model_dir` breaks (each a sentence naming the rule), and the facts read."""
    if not rules.active():
        return [], {}
    if not model_dir.is_dir():
        return [f"the submission must be a model folder; {model_dir.name} is not a folder"], {}
    try:
        facts = model_facts(model_dir)
    except UnreadableWeights as exc:
        return [f"weights: {exc}"], {}
    summary = {
        "parameters": facts.parameters,
        "load_memory_gb": round(facts.load_bytes / 1e9, 4),
        "dtypes": facts.dtypes,
    }
    broken: list[str] = []
    if (
        rules.require_safetensors
        or rules.max_parameters
        or rules.max_load_memory_gb
        or rules.forbid_quantized
    ):
        if facts.pickled and not facts.parameters:
            broken.append(
                "require_safetensors: weights must be in safetensors format (found only pickled weights: "
                + ", ".join(facts.pickled[:3])
                + "); the limits can only be checked on safetensors"
            )
        elif not facts.parameters:
            broken.append("no model weights found (no *.safetensors file in the submission)")
    if rules.max_parameters is not None and facts.parameters > rules.max_parameters:
        broken.append(
            f"max_parameters: the model has {_count(facts.parameters)} parameters, "
            f"more than the {_count(rules.max_parameters)} allowed"
        )
    if rules.max_load_memory_gb is not None and facts.load_bytes > rules.max_load_memory_gb * 1e9:
        broken.append(
            f"max_load_memory_gb: the weights need {_gb(facts.load_bytes)} to load, "
            f"more than the {rules.max_load_memory_gb:g} GB allowed"
        )
    if rules.forbid_quantized:
        qc = facts.config.get("quantization_config")
        reasons = []
        if qc:
            method = (
                qc.get("quant_method") or (qc.get("load_in_4bit") and "4-bit") or "unknown method"
            )
            reasons.append(f"config.json has a quantization_config ({method})")
        if facts.quantized_tensors:
            reasons.append(
                f"{len(facts.quantized_tensors)} quantized tensors, e.g. {facts.quantized_tensors[0]}"
            )
        if facts.quantized_files:
            reasons.append("quantized weight files: " + ", ".join(facts.quantized_files[:3]))
        if reasons:
            broken.append(
                "forbid_quantized: quantized weights are not allowed (" + "; ".join(reasons) + ")"
            )
    if rules.allowed_base_models:
        family = [fp for fp in rules.allowed_base_models if _matches(facts.config, fp)]
        if family and not any(
            fp.max_parameters is None or facts.parameters <= fp.max_parameters for fp in family
        ):
            fp = max(family, key=lambda f: f.max_parameters or 0)
            broken.append(
                f"allowed_base_models: a {fp.name} model may have at most "
                f"{_count(fp.max_parameters or 0)} parameters; this one has "
                f"{_count(facts.parameters)}"
            )
        if not family:
            names = ", ".join(fp.name for fp in rules.allowed_base_models)
            got = {
                k: facts.config.get(k)
                for k in ("model_type", "hidden_size", "num_hidden_layers", "vocab_size")
            }
            broken.append(
                f"allowed_base_models: the model's architecture {got} matches none of the approved base models ({names})"
            )
    if rules.allowed_dtypes:
        others = {
            d: n
            for d, n in facts.dtypes.items()
            if d not in rules.allowed_dtypes
            and not (rules.forbid_quantized and d in QUANTIZED_DTYPES)
        }
        if others:
            stored = ", ".join(f"{_count(n)} parameters in {d}" for d, n in sorted(others.items()))
            broken.append(
                f"allowed_dtypes: the weights hold {stored}; only "
                f"{' or '.join(rules.allowed_dtypes)} is allowed (convert with "
                "model.to(torch.float16) or torch.float32 before save_pretrained)"
            )
    for refused in rules.refused_models:
        evidence = refused_evidence(refused, facts.config)
        if evidence:
            broken.append(
                f"refused_models: the model is {refused.name} ({evidence}), which the rules exclude"
            )
    if rules.instruction_tuned_names:
        pattern = re.compile(rules.instruction_tuned_names, re.IGNORECASE)
        named = [n for n in declared_names(model_dir, facts.config) if pattern.search(n)]
        if named:
            broken.append(
                f"instruction_tuned_names: the submission's files name {named[0]!r}, an "
                "instruction-tuned model; only base models may be started from"
            )
    if rules.forbid_training_files and (left := training_traces(model_dir)):
        broken.append(
            f"forbid_training_files: the submission holds what training leaves "
            f"({', '.join(left[:4])}); no training is allowed"
        )
    if rules.min_layers_kept is not None:
        layers = facts.config.get("num_hidden_layers")
        if isinstance(layers, int) and layers < rules.min_layers_kept:
            broken.append(
                f"min_layers_kept: {layers} layers, fewer than the {rules.min_layers_kept} required"
            )
    return broken, summary


def _matches(config: dict[str, Any], fp: ArchitectureFingerprint) -> bool:
    if fp.model_type == "*":
        if not isinstance(config.get("model_type"), str):
            return False
    elif config.get("model_type") != fp.model_type:
        return False
    for key in ("hidden_size", "num_hidden_layers", "vocab_size"):
        expected = getattr(fp, key)
        if expected is not None and config.get(key) != expected:
            return False
    return True
