"""Which checkpoint a submitted model is, as far as its files say: a rule that allows a
family may still exclude some of its checkpoints (a later generation the challenge's
list predates; an instruction-tuned start where only base models are allowed).

An architecture is a fact of config.json; a checkpoint's identity is not, so only
what the files give away is read: config values that differ between generations
(Llama 3's 128,256-token vocabulary), and the Hub ids the files name (config.json's
`_name_or_path`, which transformers wrote before 5.0; a model card's `base_model:`).
A local folder's name (`out-sft/`) is the agent's own and says nothing of where the
training started, so only Hub ids count. The files are the agent's: every read is
bounded and nothing is followed out of the folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlra.tools.sandbox import trees


class RefusedModel(BaseModel):
    """A checkpoint the rules exclude although its architecture is allowed: a later
    generation of an allowed family (Llama 3 where the list says "LLaMA or Llama 2"),
    told by its config's values."""

    model_config = ConfigDict(extra="forbid")

    name: str
    model_type: str | None = None
    """Only configs of this model_type; None: any."""
    config_any: dict[str, list[Any]] = Field(default_factory=dict)
    """Config values that identify the model: it matches when any key (dotted for a
    nested value: `rope_parameters.rope_type`) holds one of its listed values."""

    @field_validator("config_any")
    @classmethod
    def _identifies_something(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        if not any(value.values()):
            raise ValueError("lists no config value that identifies the model")
        return value


MAX_CARD_BYTES = 1024 * 1024
"""A model card (README.md) is read this far for its `base_model:` lines."""


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
HUB_CACHE = re.compile(r"models--([\w.-]+?)--([\w.-]+)")


def hub_id(name: str) -> str | None:
    """`name` as a Hub model id (`org/model`, or the folder of the Hub's cache that holds
    it), or None for anything else: a local folder's name (`out-sft/`) says nothing of
    which checkpoint the training started from."""
    cached = HUB_CACHE.search(name)
    if cached:
        return f"{cached.group(1)}/{cached.group(2)}"
    return name if HUB_ID.match(name) and not name.startswith((".", "/")) else None


def declared_names(model_dir: Path, config: dict[str, Any]) -> list[str]:
    """The Hub checkpoints a submission's files name: config.json's `_name_or_path`
    (written by transformers before 5.0) and a model card's `base_model:` entries."""
    names = [str(config["_name_or_path"])] if config.get("_name_or_path") else []
    names += _card_base_models(model_dir)
    return [found for found in map(hub_id, names) if found is not None]


def _card_base_models(model_dir: Path) -> list[str]:
    """The `base_model:` entries of a model card's front matter (one value or a list)."""
    try:
        fd = os.open(model_dir / "README.md", os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return []
    try:
        card = trees.read_bounded(fd, MAX_CARD_BYTES).decode("utf-8", "replace")
    except (OSError, trees.TooLarge):
        return []
    finally:
        os.close(fd)
    names: list[str] = []
    in_list = False
    for line in card.splitlines()[:200]:
        stripped = line.strip()
        if stripped.startswith("base_model:"):
            value = stripped.removeprefix("base_model:").strip().strip("'\"")
            names += [value] if value else []
            in_list = not value
        elif in_list and stripped.startswith("- "):
            names.append(stripped[2:].strip().strip("'\""))
        else:
            in_list = False
    return names


def _config_value(config: dict[str, Any], dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def refused_evidence(refused: RefusedModel, config: dict[str, Any]) -> str:
    """Why the config says the model is `refused` (empty: it does not)."""
    if refused.model_type is not None and config.get("model_type") != refused.model_type:
        return ""
    for key, values in refused.config_any.items():
        got = _config_value(config, key)
        if got is not None and not isinstance(got, (dict, list)) and got in values:
            return f"config.json has {key} = {got!r}"
    return ""
