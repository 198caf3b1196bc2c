"""The batch report's plots: score.png and normalized.png per task and model,
validation.png each run's validation score over its run clock.

Every text from a run or a task is drawn through `plot_text` (batch/report_text.py): a
`$` in a name is a dollar sign, never math that stops the report. Apart from the
tables because matplotlib is optional (the `batch` extra): the tables
need nothing beyond mlra, and `can_plot` says whether the plots can be drawn here.
matplotlib's Agg backend draws them, so no display is needed.
"""

import importlib
from pathlib import Path

from mlra.batch.report_rows import Group, RunRow
from mlra.batch.report_text import plot_text

Reference = tuple[float | None, float | None]
"""A task's baseline and top scores, as its runs' gradings recorded them."""


def references(rows: list[RunRow]) -> dict[str, Reference]:
    """Each task's baseline and top, from the first of its runs that recorded them."""
    found: dict[str, Reference] = {}
    for row in rows:
        if row.task not in found and (row.baseline_score is not None or row.top_score is not None):
            found[row.task] = (row.baseline_score, row.top_score)
    return found


def plot(out: Path, groups: list[Group], refs: dict[str, Reference] | None = None) -> None:
    """score.png with each task's baseline and top drawn across its bars (bars alone
    hid where 0.7674 stands between 0.7593 and 0.8872), and normalized.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({g.task for g in groups})
    models = sorted({g.model for g in groups})
    by_key = {(g.task, g.model): g for g in groups}
    width = 0.8 / max(1, len(models))

    fig, axes = plt.subplots(
        1, len(tasks), figsize=(max(4.0, 3.5 * len(tasks)), 3.5), squeeze=False
    )
    for ax, task in zip(axes[0], tasks, strict=True):
        present = [m for m in models if (task, m) in by_key]
        means = [by_key[task, m].score_mean or 0.0 for m in present]
        errs = [by_key[task, m].score_se or 0.0 for m in present]
        ax.bar(range(len(present)), means, yerr=errs, capsize=4, color="tab:blue")
        baseline, top = (refs or {}).get(task, (None, None))
        for value, name, colour in ((baseline, "baseline", "tab:orange"), (top, "top", "black")):
            if value is not None:  # over the bars, in a colour apart from theirs
                ax.axhline(value, color=colour, linewidth=1.2, linestyle="--", zorder=3)
                label = plot_text(f"{name} {value:.4g}")
                ax.annotate(
                    label,
                    (1.0, value),
                    xycoords=("axes fraction", "data"),
                    xytext=(-2, 2),
                    textcoords="offset points",
                    ha="right",
                    fontsize=7,
                    color=colour,
                    zorder=4,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5},
                )
        names = [plot_text(m) for m in present]
        ax.set_xticks(range(len(present)), names, rotation=20, ha="right", fontsize=8)
        ax.set_title(plot_text(task))
        ax.set_ylabel("score (mean ± SE)")
    fig.tight_layout()
    fig.savefig(out / "score.png", dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(4.0, 1.5 * len(tasks) + 2), 3.5))
    for i, model in enumerate(models):
        xs = [t + i * width for t in range(len(tasks))]
        means = [(by_key.get((task, model)) or _EMPTY).normalized_mean or 0.0 for task in tasks]
        errs = [(by_key.get((task, model)) or _EMPTY).normalized_se or 0.0 for task in tasks]
        ax.bar(xs, means, width=width, yerr=errs, capsize=3, label=plot_text(model))
    ax.axhline(0.0, color="gray", linewidth=0.8)
    ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
    ticks = [t + width * (len(models) - 1) / 2 for t in range(len(tasks))]
    ax.set_xticks(ticks, [plot_text(t) for t in tasks])
    ax.set_ylabel("normalized score (0 baseline, 1 top)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "normalized.png", dpi=100)
    plt.close(fig)


def plot_validation(out: Path, rows: list[RunRow]) -> None:
    """validation.png: each run's validation score over its run clock, one panel a task,
    a colour a model; a run's best so far is marked. Validation scores, never the test
    split's: what the agent saw while it worked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r.validation_curve]
    tasks = sorted({r.task for r in shown}) or ["(no validations)"]
    models = sorted({r.model for r in shown})
    colours = {m: f"C{i % 10}" for i, m in enumerate(models)}
    fig, axes = plt.subplots(
        1, len(tasks), figsize=(max(4.5, 4.0 * len(tasks)), 3.5), squeeze=False
    )
    for ax, task in zip(axes[0], tasks, strict=True):
        labelled: set[str] = set()
        metric = ""
        for run in (r for r in shown if r.task == task):
            minutes = [t / 60 for t, _ in run.validation_curve]
            scores = [score for _, score in run.validation_curve]
            label = plot_text(run.model) if run.model not in labelled else None
            labelled.add(run.model)
            colour = colours[run.model]
            ax.plot(minutes, scores, marker=".", color=colour, alpha=0.8, label=label)
            if run.best_validation is not None and run.best_validation in scores:
                i = scores.index(run.best_validation)
                ax.plot(minutes[i], scores[i], marker="*", markersize=11, color=colour)
            metric = metric or (run.validation_metric or "")
        ax.set_title(plot_text(task))
        ax.set_xlabel("run clock (minutes)")
        ax.set_ylabel(plot_text(f"validation {metric or 'score'}"))
        if not shown:
            ax.text(0.5, 0.5, "no run validated", ha="center", va="center")
        elif labelled:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "validation.png", dpi=100)
    plt.close(fig)


_EMPTY = Group("", "", 0, 0, None, None, None, None, 0.0, None, 0, 0.0)


PLOTS_MISSING = (
    "note: no plots: matplotlib is not installed (pip install 'mlra[batch]' adds it); "
    "the tables are written"
)
"""Said in place of the plots where matplotlib is missing: the quick start's install
leaves out the batch extra, and the tables need nothing beyond mlra itself."""


def can_plot() -> bool:
    """Whether matplotlib can be imported here (it is the `batch` extra's)."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        return False
    return True
