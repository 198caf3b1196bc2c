"""Numbers read from the lines a training process prints, by the shapes training logs
commonly take: `step 120 loss 2.79`, `iter 5: loss 2.1`, `loss=2.31 acc=0.5`,
`eval_loss: 1.9`, a tqdm bar's postfix (`50/50 [00:01<00:00, loss=2.31]`), Hugging Face
Trainer's dict lines (`{'loss': 2.1, 'epoch': 0.5}`) and JSON lines.

A wrong point on a curve misleads more than a missing one, so the reading is
conservative: a number is taken only where a name stands right before it and nothing
number-like follows it. Versions (`torch 2.1.0`), dates, clock times, IP addresses,
percentages, fractions (`Epoch 1/10`), hex and thousands separators give none: each
has a `.digit`, `-`, `:`, `%`, `/`, a letter or a `,digit` straight after its first
number. A bare `name value` pair (no `=` or `:`) is taken only on a line that states a
step, or where the name is a metric's (`loss`, `acc`, `lr`...), since `Python 3.11` is
that shape too.

Numbers are read only from a training-progress line: one that states a step, an epoch,
or a metric's name (`loss`, `acc`...). A script prints its settings and sizes in the
same shapes (tiny-lm's `model: 0.69M parameters, d=128, layers=2`, `tokenizer: 2048
tokens`): read, they were listed beside the loss as series `d`, `layers`, `tokenizer`,
which a researcher does not call curves. The cost: a line of custom numbers with none
of those names (`foo=0.3`) gives no point; printed beside a step or a loss it does.
What a progress line repeats unchanged (`batch_size=32` on every line) is a one-off
number, not a curve (one_off.py).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import cast

MAX_LINE_CHARS = 4000
"""Longer lines are not read (a dumped tensor, a minified blob): no training log's
metric line is that long."""
MAX_POINTS_PER_LINE = 32

STEP_KEYS = frozenset({"step", "steps", "global_step", "iter", "iters", "iteration", "it"})
"""Names that give the line's step rather than a series of their own."""
METRIC_WORDS = (
    "loss", "acc", "accuracy", "lr", "learning_rate", "ppl", "perplexity", "f1", "bleu",
    "rouge", "auc", "grad_norm", "error", "err", "score", "reward", "bpb", "bpc", "wer",
    "mse", "mae", "rmse", "precision", "recall", "entropy", "kl", "top1", "top5",
)  # fmt: skip
"""A bare `name value` pair is taken where the name holds one of these."""
PROGRESS_WORDS = frozenset({"epoch", "epochs"})
"""Beside STEP_KEYS and METRIC_WORDS, names that make a line a training-progress line."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_KEY = r"[A-Za-z_][\w./-]*"
_PAIR = re.compile(
    rf"(?<![\w./-])(?P<key>{_KEY})(?P<sep>\s*=\s*|:\s+|\s+)(?P<value>{_NUMBER})"
    r"(?P<frac>/\d+)?"
    # What may follow a number that is a value: the line's end, a space or a closing
    # punctuation mark, never a digit group, a unit, a clock's colon or a date's dash.
    r"(?=$|[\s;|)\]}]|,(?!\d))"
)
_STEP_FIRST = re.compile(rf"^\s*\[?\s*(?P<key>{_KEY})\s+(?P<value>\d+)(?:/\d+)?\s*[\]:|,]")
"""`iter 5: loss 2.1`, `[step 3] loss ...`: a step key leading the line."""
_ENV_LINE = re.compile(r"[A-Z_][A-Z0-9_]*=\S*")
_CALL = re.compile(r"[A-Za-z_][\w.]*\([^()]*\)")
_TABLE = re.compile(r"\s+[-+]?\.?\d")
IGNORED = frozenset({"v_num", "pid", "port", "seed", "rank", "local_rank", "world_size"})
"""Names that are never a curve: Lightning's version number, process ids and the like."""


@dataclass(frozen=True)
class LinePoint:
    name: str
    value: float
    step: int | None


def trim_name(name: str) -> str:
    """A series name as the source writes it, less the punctuation around it."""
    return name.strip().strip("-_./:'\"")


def _is_metric_name(key: str) -> bool:
    low = key.lower()
    return any(word in re.split(r"[^a-z0-9]+", low) or low.endswith(word) for word in METRIC_WORDS)


def _is_progress(names: Iterable[str], step: int | None) -> bool:
    """Whether a line with these names is a training-progress line (the docstring: why)."""
    if step is not None:
        return True
    for name in names:
        leaf = name.lower().rsplit("/", 1)[-1]
        if leaf in STEP_KEYS or leaf in PROGRESS_WORDS or _is_metric_name(name):
            return True
    return False


def _finite(value: float) -> bool:
    return math.isfinite(value)


def points_of_mapping(obj: Mapping[str, object], *, prefix: str = "") -> list[LinePoint]:
    """The numbers of a JSON object or a Python dict line: one series a numeric key
    (nested objects joined with `/`), its step from a step key; booleans, strings and
    non-finite numbers left out."""
    flat: list[tuple[str, float]] = []

    def walk(mapping: Mapping[str, object], at: str, depth: int) -> None:
        for key, value in mapping.items():
            if not isinstance(key, str):
                continue
            name = f"{at}{trim_name(key)}"
            if isinstance(value, Mapping) and depth < 2:
                walk(cast(Mapping[str, object], value), f"{name}/", depth + 1)
            elif isinstance(value, int | float) and not isinstance(value, bool):
                try:
                    flat.append((name, float(value)))
                except OverflowError:  # an integer past any float: no value of a curve
                    continue

    walk(obj, prefix, 0)
    step = _step_of(flat)
    return [
        LinePoint(name, value, step)
        for name, value in flat
        if name and name.lower() not in STEP_KEYS and _finite(value)
    ][:MAX_POINTS_PER_LINE]


def _step_of(pairs: Iterable[tuple[str, float]]) -> int | None:
    for name, value in pairs:
        if name.lower() in STEP_KEYS and value.is_integer() and value >= 0:
            return int(value)
    return None


def _dict_line(text: str) -> list[LinePoint] | None:
    """A line that is a JSON object or a Python dict literal; None where it is not one."""
    try:
        obj = json.loads(text)
    except RecursionError:
        return None  # nested deeper than any line of metrics
    except ValueError:
        try:
            obj = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            return None
    if not isinstance(obj, dict):
        return None
    return points_of_mapping(cast(dict[str, object], obj))


def _line_step(points: list[LinePoint]) -> int | None:
    return next((p.step for p in points if p.step is not None), None)


def parse_line(line: str) -> list[LinePoint]:
    """The points one line of output states; none for a line that states none."""
    if len(line) > MAX_LINE_CHARS:
        return []
    text = _ANSI.sub("", line).strip()
    if not text or not any(c.isdigit() for c in text):
        return []
    if text[0] == "{" and text[-1] == "}":
        found = _dict_line(text)
        if found is not None:
            return found if _is_progress((p.name for p in found), _line_step(found)) else []
    if _ENV_LINE.fullmatch(text):
        return []  # `SHLVL=1`: an environment listing, not a metric
    calls = [m.span() for m in _CALL.finditer(text)]
    pairs: list[tuple[str, str, float, bool]] = []  # key, separator, value, had a fraction
    step: int | None = None
    lead = _STEP_FIRST.match(text)
    if lead is not None and lead["key"].lower() in STEP_KEYS:
        step = int(lead["value"])
    for match in _PAIR.finditer(text):
        key = trim_name(match["key"])
        if not key or not (key[0].isalpha() or key[0] == "_") or key.lower() in IGNORED:
            continue
        if any(a < match.start() < b for a, b in calls):
            continue  # `Linear(in_features=768)`, `Namespace(lr=0.1)`: a repr, not a metric
        if "=" not in match["sep"] and _TABLE.match(text, match.end()):
            continue  # `Mem:  24047  1234`: a table's row, not one value
        try:
            value = float(match["value"])
        except ValueError:
            continue
        pairs.append((key, match["sep"], value, match["frac"] is not None))
    if not pairs:
        return []
    for key, _, value, _ in pairs:
        if step is None and key.lower() in STEP_KEYS and value.is_integer() and value >= 0:
            step = int(value)
    if not _is_progress((key for key, _, _, _ in pairs), step):
        return []  # `model: d=128, layers=2`: a script's settings, not its progress
    out: list[LinePoint] = []
    for key, sep, value, fraction in pairs:
        if key.lower() in STEP_KEYS:
            continue
        if fraction:  # `Epoch 1/10`, `3/50`: a count of a total, not a value
            continue
        if not sep.strip() and step is None and not _is_metric_name(key):
            continue  # `Python 3.11`, `CUDA 12`: a bare pair needs a step or a metric's name
        if not _finite(value):
            continue
        out.append(LinePoint(key, value, step))
        if len(out) >= MAX_POINTS_PER_LINE:
            break
    return out


__all__ = ["STEP_KEYS", "LinePoint", "parse_line", "points_of_mapping", "trim_name"]
