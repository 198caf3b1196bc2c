"""Names a tracker accepts, made from the names a run's scripts gave their numbers.

A series' name is whatever the training printed or wrote (agent/metrics/): `a/../../x`,
`![p](https://host/p.png)`, a thousand characters, a newline, a NUL, a lone surrogate.
MLflow refuses a metric, param or tag key outside `[/\\w.\\- :]`, one that is a path
that would resolve to another (`..` and `.` segments, `//`, a leading or trailing
`/`) or one over 250 characters (mlflow/utils/validation.py), and its file store would
write it as a path; W&B takes a trailing `*` as a glob, a leading `_` as its own hidden
keys, and has keys of its own (`mlra/step`, `mlra/wall_s` here); protobuf (W&B's
records, TensorBoard's tags) cannot encode a lone surrogate. So every exported name
goes through one rule that all three accept: anything but letters, digits and `_-. /`
becomes `_` (a colon too: MLflow refuses it on Windows), empty, `.` and `..` path
segments are dropped or become `_`, and a name over 250 characters is cut and ends in
`-` and 8 hex digits of its SHA-256; W&B's keys also lose a leading `_`.

Deterministic and unique over an experiment: a name that needs no change keeps itself,
the same name maps to the same key in every run, and two names that would meet on one
key are told apart by the suffix of the original's hash. Each writer keeps the
originals of the names it changed where its tracker allows (`renamed`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable

from mlra.batch.export.source import Experiment

MAX_KEY = 250
"""MLflow's longest key (MAX_ENTITY_KEY_LENGTH), kept for W&B and TensorBoard too."""

_NOT_ALLOWED = re.compile(r"[^\w\-. /]")
"""As MLflow's own rule on Windows (`[/\\w.\\- ]`): `\\w` is a Unicode letter, digit or
`_`, never a control character, a surrogate or a mark that reorders text."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def text_value(text: str) -> str:
    """A value (a run's name, a parameter, a tag) with each lone surrogate as U+FFFD:
    no tracker's client can encode one (a folder name that was not UTF-8 holds them)."""
    return _SURROGATE.sub("\ufffd", text)


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def tracker_name(name: str) -> str:
    """`name` as MLflow, W&B and TensorBoard all accept it (itself where it already is)."""
    safe = _NOT_ALLOWED.sub("_", name)
    parts = [p if p not in (".", "..") else "_" * len(p) for p in safe.split("/") if p]
    safe = "/".join(parts) or "_"
    if safe.startswith(".."):
        safe = "_" + safe[1:]
    if len(safe) > MAX_KEY:
        safe = safe[: MAX_KEY - 9].rstrip("/") + "-" + _digest(name)
    return safe


def wandb_name(name: str) -> str:
    """`tracker_name`, and no leading `_` (W&B's own keys: `_step`, `_runtime`)."""
    safe = tracker_name(name)
    return "m" + safe if safe.startswith("_") else safe


class SafeNames:
    """One tracker's keys for an experiment's names, each name always the same key."""

    def __init__(
        self,
        rule: Callable[[str], str],
        names: Iterable[str],
        reserved: Iterable[str] = (),
    ) -> None:
        self.rule = rule
        self._keys: dict[str, str] = {}
        self._taken: set[str] = set(reserved)
        wanted = sorted(set(names))
        # Names that need no change claim themselves first: a clean `loss` stays `loss`
        # whatever other name would have been made into it.
        for name in wanted:
            if rule(name) == name and name not in self._taken:
                self._claim(name, name)
        for name in wanted:
            if name not in self._keys:
                self._claim(name, self._free(name))

    def _claim(self, name: str, key: str) -> None:
        self._keys[name] = key
        self._taken.add(key)

    def _free(self, name: str) -> str:
        key = self.rule(name)
        if key not in self._taken:
            return key
        base = key[: MAX_KEY - 9].rstrip("/") + "-" + _digest(name)
        key, n = base, 1
        while key in self._taken:  # a name made to meet another's hash: counted on
            n += 1
            key = f"{base[: MAX_KEY - 12]}-{n}"
        return key

    def __getitem__(self, name: str) -> str:
        """The key of `name` (one not seen before is made and kept unique too)."""
        key = self._keys.get(name)
        if key is None:
            self._claim(name, key := self._free(name))
        return key

    def renamed(self, names: Iterable[str]) -> dict[str, str]:
        """Of `names`, each changed one's key and its original, in key order."""
        pairs = {self[n]: n for n in names if self[n] != n}
        return dict(sorted(pairs.items()))


def names_of(experiment: Experiment) -> set[str]:
    """Every name an export writes as a key: curves, validations, one-off and final
    numbers, parameters."""
    names: set[str] = set()
    for run in experiment.runs:
        names.update(s.name for s in run.series + run.validations)
        names.update(run.one_offs, run.final, run.params)
    return names
