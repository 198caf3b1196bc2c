"""`mlra tasks import PATH OUT`: a foreign task folder written as an mlra task folder
for a user who wants to edit it: `task.toml` (what the loader reads the folder as),
`env/` (the prepared starter), `scripts/` (the prepared hidden files, with mlra's
grading driver beside the benchmark's own files). It loads as it is, and grades as
the foreign folder does: the folders keep the benchmark's names, since its scripts
find each other by them (amp-parkinsons' eval.py imports `scripts/../env/train.py`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from mlra.tasks.foreign import mlagentbench, mlrcbench
from mlra.tasks.foreign.common import SKIPPED
from mlra.tasks.foreign.loader import (
    LAYOUT_NAMES,
    ForeignError,
    detect,
    foreign_data,
    marker,
    recorded_baseline,
)
from mlra.tasks.spec import TaskError, TaskSpec

STARTER, HIDDEN = "env", "scripts"


def export(task: TaskSpec, out: Path) -> Path:
    """Write `task` (read from a prepared copy) as an mlra task folder at `out`."""
    root = task.root
    found = marker(root)
    layout = detect(root)
    if found is None or layout is None:
        raise TaskError(f"{root}: not a prepared MLAgentBench or MLRC-Bench task")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TaskError(f"{out}: already exists and is not an empty folder")
    module = mlrcbench if layout == "mlrcbench" else mlagentbench
    baseline = recorded_baseline(root)
    try:
        data, _ = foreign_data(root)  # with what the user stated in its mlra.toml
    except ForeignError as exc:
        raise TaskError(str(exc)) from None
    driver = f"{HIDDEN}/mlra_score_{layout}.py"
    data["files"]["starter"] = [STARTER]
    data["files"]["hidden"] = [HIDDEN]
    settings = data["evaluator"]["settings"]
    settings["script"] = driver
    if layout == "mlrcbench":
        settings["args"] = mlrcbench.driver_args("test", scripts=HIDDEN, env=STARTER)
        data["validation"]["settings"]["args"] = mlrcbench.driver_args(
            "dev", scripts=HIDDEN, env=STARTER
        )
    else:
        settings["args"] = ["--scripts", HIDDEN, "--env", STARTER]
    out.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns(*SKIPPED)
    shutil.copytree(root / "env", out / STARTER, symlinks=True, ignore=ignore)
    shutil.copytree(root / "scripts", out / HIDDEN, symlinks=True, ignore=ignore)
    shutil.copy2(module.DRIVER, out / driver)
    source = "measured by running the unchanged starter" if baseline is not None else "unset"
    published = mlrcbench.PUBLISHED.get(mlrcbench.published_name(root, found.name), {})
    if layout == "mlrcbench" and "test" in published:
        source = f"published ({mlrcbench.PUBLISHED_SOURCE})"
    header = [
        f"# Imported by `mlra tasks import` from the {LAYOUT_NAMES[layout]} task folder",
        f"# {found.source} (content hash {found.hash[:16]}; prepare.py "
        + ("ran" if found.prepared else "absent")
        + ").",
        f"# metric.baseline: {source}.",
    ]
    if not data["metric"].get("direction_known", True):
        header.append(
            "# metric.higher_is_better: unknown (mlra did not recognize this evaluator); "
            "set it (true or false), or success is never judged."
        )
    if baseline is None and data["metric"]["baseline"] is None:
        # A success rule that needs a baseline cannot load without one.
        rule = data["metric"].pop("success_rule", None)
        data["metric"].pop("success_improvement", None)
        if rule is not None:
            header.append(
                f'# metric.success_rule = "{rule}" is the benchmark\'s, once metric.baseline '
                f"is set (measure it: mlra run {out} --model baseline)."
            )
    (out / "task.toml").write_text("\n".join(header) + "\n\n" + to_toml(data))
    return out


def to_toml(data: dict[str, Any]) -> str:
    """The few shapes a task.toml has: scalars and lists at the top and in tables, a
    table's own tables inline, and lists of tables (`[[baseline.steps]]`)."""
    lines = [f"{k} = {_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for section, table in data.items():
        if not isinstance(table, dict):
            continue
        lines += ["", f"[{section}]"]
        later: list[tuple[str, list[dict[str, Any]]]] = []
        for key, value in table.items():
            if value is None:
                continue
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                later.append((key, value))
                continue
            lines.append(f"{key} = {_value(value)}")
        for key, items in later:
            for item in items:
                lines += ["", f"[[{section}.{key}]]"]
                lines += [f"{k} = {_value(v)}" for k, v in item.items() if v is not None]
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = [f"{json.dumps(str(k))} = {_value(v)}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    raise TypeError(f"no TOML for {type(value).__name__}")
