"""What the user states about a foreign folder that its own files do not say: a small
`mlra.toml` in the folder, laid over the data the folder is read as. Its main use is
the direction of a metric mlra cannot recognize (an MLAgentBench-layout folder of the
user's own with an error metric): without it the run scores, but no success is judged.

    [metric]
    name = "mean absolute error"
    higher_is_better = false

Only `[metric]` fields are taken (the rest of a folder is the benchmark's). The file
is read from the source folder each time, not from the prepared copy, and is left out
of the folder's content hash: stating a direction never prepares the folder again."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

OVERLAY_FILE = "mlra.toml"

ALLOWED = {
    "name",
    "higher_is_better",
    "baseline",
    "top",
    "success_rule",
    "success_fraction",
    "success_improvement",
    "success_threshold",
    "score_range",
}


class OverlayError(Exception):
    """An mlra.toml that cannot be read; the message names the file and the field."""


def overlay_path(folder: Path, source: str | None) -> Path | None:
    """The overlay for a folder: in its source folder where it is a prepared copy."""
    for where in ([Path(source)] if source else []) + [folder]:
        path = where / OVERLAY_FILE
        if path.is_file():
            return path
    return None


def apply_overlay(data: dict[str, Any], path: Path | None) -> dict[str, Any]:
    """`data` with the overlay's `[metric]` laid over it; a stated direction is known."""
    if path is None:
        return data
    try:
        stated = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise OverlayError(f"{path}: not readable TOML: {exc}") from None
    unknown = set(stated) - {"metric"}
    if unknown:
        raise OverlayError(f"{path}: only [metric] may be stated here, not {sorted(unknown)}")
    metric = stated.get("metric", {})
    if not isinstance(metric, dict):
        raise OverlayError(f"{path}: [metric] must be a table")
    extra = set(metric) - ALLOWED
    if extra:
        raise OverlayError(
            f"{path}: field metric.{sorted(extra)[0]}: is not a field mlra.toml sets"
        )
    if "higher_is_better" in metric and not isinstance(metric["higher_is_better"], bool):
        raise OverlayError(f"{path}: field metric.higher_is_better: must be true or false")
    merged = dict(data)
    merged["metric"] = {**data.get("metric", {}), **metric}
    if "higher_is_better" in metric:
        merged["metric"]["direction_known"] = True
    return merged
