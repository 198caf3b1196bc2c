"""A normalized score as every display writes it: `mlra runs`, `mlra compare`, report.md,
the share pages, the headless lines and notifications. It is a fraction of the gap from
the task's baseline to its top (0 the baseline, 1 the top, below 0 worse than the
baseline), so its sign always shows and three decimals are a tenth of a percent of the
gap; each display had its own (`+0.482`, `0.4819`, `0.09093`), one run read three ways.
Raw metric values keep their own formats: their scale is the task's."""

from __future__ import annotations


def format_normalized(value: float) -> str:
    if round(value, 3) == 0:
        return "+0.000"  # not "-0.000": a hair below the baseline is the baseline
    return f"{value:+.3f}"
