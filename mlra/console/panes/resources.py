"""The Resources pane: GPUs (or plainly "no GPU"), CPU, RAM and the workspace's
disk use from the run's resource samples, with the run's own commands' CPU and
memory beside the machine's; the clock against the deadline; steps, tokens and
cost against their limits; how full the model's context window is and how much
of the prompt the provider's cache served; the whole run's use of its budget (its
attempts' sandboxes included: "Pool"). Every figure comes from the log's
events, so a replay shows the same."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Unpack

from rich.text import Text
from textual.widgets import Static

from mlra import events as ev
from mlra.agent.record.state import RunState
from mlra.console.panes import WidgetOptions, redraw
from mlra.console.text.run_rows import short_gb
from mlra.counts import format_tokens
from mlra.durations import format_duration
from mlra.terminal_text import printable_line

HISTORY = 60
SPARK = "▁▂▃▄▅▆▇█"


def bar(fraction: float, width: int) -> str:
    fraction = min(1.0, max(0.0, fraction))
    full = round(fraction * width)
    return "█" * full + "░" * (width - full)


def spark(values: deque[float], width: int) -> str:
    shown = list(values)[-width:]
    return "".join(SPARK[min(len(SPARK) - 1, int(v / 100 * len(SPARK)))] for v in shown)


def gigabytes(mb: float) -> str:
    return f"{mb / 1024:.1f} GB" if mb >= 1024 else f"{mb:.0f} MB"


def tokens(n: int, *, estimated: bool = False) -> str:
    """A token count in short ("4.5k"; "~4.5k" where it is mlra's estimate)."""
    return format_tokens(n, estimated=estimated)


def run_usage(sample: ev.ResourceSample, *, compact: bool = False) -> str:
    """The run's own commands: CPU in percent of one CPU (as `top`), resident memory."""
    parts = []
    if sample.run_cpu_percent is not None:
        parts.append(f"cpu {sample.run_cpu_percent:.0f}%")
    if sample.run_mem_mb is not None:
        parts.append(f"mem {gigabytes(sample.run_mem_mb)}")
    if sample.run_processes is not None and not compact:
        parts.append(f"{sample.run_processes} proc" + ("" if sample.run_processes == 1 else "s"))
    return " · ".join(parts)


def budget_use(budget: ev.Budget | None, sample: ev.ResourceSample, *, compact: bool) -> str:
    """The whole run's use against its budget (`run_started`): everything it starts
    together, attempts included (`mem 0.2/10G · disk 1.4/38G · 3/4096 procs`); "" for a
    run with no budget recorded."""
    if budget is None:
        return ""
    memory = sample.pool_mem_mb if sample.pool_mem_mb is not None else sample.run_mem_mb
    disk = sample.pool_disk_mb if sample.pool_disk_mb is not None else sample.disk_workspace_mb
    parts = []
    for name, used, limit in (("mem", memory, budget.memory_mb), ("disk", disk, budget.disk_mb)):
        if used is not None:
            parts.append(
                f"{name} {short_gb(used, unit=False)}/{'none' if limit is None else short_gb(limit)}"
            )
    if sample.pool_processes is not None and budget.pids and not compact:
        parts.append(f"{sample.pool_processes}/{budget.pids} procs")
    return " · ".join(parts)


def context_gauge(state: RunState, width: int) -> Text | None:
    """The latest turn's prompt against the model's window, and the cache's share of
    all prompt tokens so far; None before the first turn of a run that knows neither."""
    window = state.context_window
    if not window and not state.context_tokens:
        return None
    held = tokens(state.context_tokens, estimated=state.context_estimated)
    out = Text()
    if window and not state.context_tokens:  # no prompt counted yet: not 0%
        out.append(f"?/{tokens(window)}")
        out.append(" not known yet" if width < 10 else " (the prompt is not counted yet)", "dim")
    elif window and width < 10:  # compact: the share in words, no room for a bar
        frac = state.context_tokens / window
        style = "red" if frac > 0.85 else "yellow" if frac > 0.6 else ""
        out.append(f"{held}/{tokens(window)} {frac:.0%}", style=style)
    elif window:
        frac = state.context_tokens / window
        style = "red" if frac > 0.85 else "yellow" if frac > 0.6 else "green"
        out.append(bar(frac, width), style=style)
        out.append(f" {held}/{tokens(window)}")
    else:
        out.append(held)
    rate = state.cache_hit_rate
    if rate is not None:
        out.append(f" · cache {rate:.0%}", style="dim")
    return out


def sampling_stopped(state: RunState) -> str:
    """Why no resource sample comes any more (sampling stops with the agent), or ""
    while the samples are the run's load now."""
    if state.finished is not None:
        return "run stopped" if state.finished.reason == "stopped" else "run ended"
    if state.evaluating:
        return "evaluating"
    return ""


JOBS_SHOWN = 5
"""Jobs listed in the pane: the running ones first, then the latest to end."""


def jobs_section(
    state: RunState,
    elapsed_s: float,
    *,
    compact: bool = False,
    last_line: Callable[[str], str | None] | None = None,
    width: int = 40,
    held: bool = False,
) -> Text | None:
    """The run's background jobs, one line each: running (and for how long, pauses
    excluded) or how each ended; None before the first job. `last_line` gives a running
    job's latest line of output (a live run's job manager keeps it in memory; a replay
    has none, the log holds no output of jobs), shown dim under it. `held`: the run holds
    its commands (a pause, or a call waiting for approval), so a running job is suspended
    and its time stands still."""
    if not state.jobs:
        return None
    records = list(state.jobs.values())
    running = [j for j in records if j.ended is None]
    ended = [j for j in reversed(records) if j.ended is not None]
    out = Text()
    out.append("Jobs ", style="bold")
    out.append(f"{len(running)} running\n" if running else "none running\n", style="dim")
    for job in (running + ended)[:JOBS_SHOWN]:
        name = job.started.name or job.started.command
        name = name if len(name) <= (14 if compact else 24) else name[: 13 if compact else 23] + "…"
        out.append(f"  {job.started.job} {printable_line(name)} ")  # the agent's: shown only
        end = job.ended
        if end is None:
            took = format_duration(max(0.0, elapsed_s - job.started.t))
            if held:
                out.append(f"suspended {took}\n", style="yellow")
            else:
                out.append(f"running {took}\n", style="green")
            line = last_line(job.started.job) if last_line is not None else None
            if line:
                room = max(8, width - 4)
                line = line if len(line) <= room else line[: room - 1] + "…"
                out.append(f"    {printable_line(line)}\n", style="dim")
        elif end.end == "exited":
            style = "" if end.exit_code == 0 else "red"
            out.append(f"exit {end.exit_code}\n", style=style)
        else:
            out.append(f"{end.end}\n", style="yellow" if end.end == "stopped" else "red")
    if len(records) > JOBS_SHOWN:
        out.append(f"  … {len(records) - JOBS_SHOWN} more\n", style="dim")
    return out


class ResourcesPane(Static):
    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self._cpu: deque[float] = deque(maxlen=HISTORY)
        self._gpu: dict[int, deque[float]] = {}
        self._shown: tuple[RunState, float] | None = None
        self.job_last_line: Callable[[str], str | None] | None = None
        """A running job's last line of output (set by a live console: its job manager)."""
        self.breaks_hold: bool | None = None
        """Whether a call waiting for approval holds the run's commands and jobs (False:
        the run was started with `--break-runs-jobs`), from the run_started this pane was
        fed; None where it was not (a replay opened past it), and then only a pause is
        said to suspend them."""

    def on_mount(self) -> None:
        self.border_title = "Resources"

    def on_resize(self) -> None:
        # The bars are as wide as the pane: drawn before the layout settled (or
        # before the terminal was resized) they would not fit until the next sample.
        if self._shown is not None:
            # After this layout pass: an update during it would keep the height
            # measured for the old text (the narrow layout's text is shorter).
            self.call_after_refresh(self._reshow)

    def _reshow(self) -> None:
        if self._shown is not None and self.is_attached:
            self.show(*self._shown)

    def feed(self, event: ev.Event) -> None:
        if isinstance(event, ev.RunStarted):
            self.breaks_hold = not event.config.get("break_runs_jobs", False)
        if isinstance(event, ev.ResourceSample):
            self._cpu.append(event.cpu_percent)
            for gpu in event.gpus:
                if gpu.util_percent is not None:
                    self._gpu.setdefault(gpu.index, deque(maxlen=HISTORY)).append(gpu.util_percent)

    def clear(self) -> None:
        """Forget the sparklines' history: a replay feeds that of another point of the run."""
        self._cpu.clear()
        self._gpu.clear()

    def show(self, state: RunState, elapsed_s: float) -> None:
        self._shown = (state, elapsed_s)
        inner = self.size.width or 40
        compact = inner < 40  # the narrow layout: one line a figure, no sparklines
        width = max(10, inner - 20)
        short = 8 if compact else 10
        out = Text()
        sample = state.resources
        stopped = sampling_stopped(state)
        if sample is None:
            out.append("waiting for the first sample…\n", style="dim")
        elif stopped:
            # The last sample's load is no longer so: figures that would read as now
            # are left out (the log keeps every sample, and replay shows them in time).
            out.append("GPU  ", style="bold")
            out.append("–\n" if sample.gpus else "no GPU\n", style="dim")
            out.append("CPU  ", style="bold")
            out.append(f"– {stopped}\n", style="dim")
            out.append("RAM  ", style="bold")
            out.append("–\n", style="dim")
            out.append("Disk ", style="bold")
            out.append(f"workspace {gigabytes(sample.disk_workspace_mb)}\n")
        else:
            disk = f"disk {gigabytes(sample.disk_workspace_mb)}"
            if sample.gpus:
                for gpu in sample.gpus:
                    util = gpu.util_percent
                    out.append(f"GPU{gpu.index} ", style="bold")
                    if util is None:  # NVML gives none for this GPU
                        out.append(f"{'util n/a':<{short + 7}}", style="dim")
                    else:
                        out.append(f"{bar(util / 100, short)} {util:3.0f}%  ", style="green")
                    out.append(
                        f"{gigabytes(gpu.mem_used_mb)}/{gigabytes(gpu.mem_total_mb)}\n"
                        if compact
                        else f"mem {gigabytes(gpu.mem_used_mb)} / {gigabytes(gpu.mem_total_mb)}\n"
                    )
                    if not compact:
                        out.append(
                            f"     {gpu.name}  {spark(self._gpu.get(gpu.index, deque()), width)}\n",
                            style="dim",
                        )
            else:
                out.append("GPU  ", style="bold")
                out.append("no GPU" + (f" · {disk}\n" if compact else "\n"), style="dim")
            out.append("CPU  ", style="bold")
            out.append(
                f"{bar(sample.cpu_percent / 100, short)} {sample.cpu_percent:3.0f}%  ",
                style="green",
            )
            out.append(
                spark(self._cpu, max(5, width - 8 - (4 if compact else 0))) + "\n", style="dim"
            )
            out.append("RAM  ", style="bold")
            frac = sample.ram_used_mb / sample.ram_total_mb if sample.ram_total_mb else 0
            out.append(
                f"{bar(frac, short)} {gigabytes(sample.ram_used_mb)}/{gigabytes(sample.ram_total_mb)}\n"
            )
            if sample.run_cpu_percent is not None or sample.run_mem_mb is not None:
                out.append("Run  ", style="bold")
                out.append(run_usage(sample, compact=compact) + "\n")
            pool = budget_use(state.budget, sample, compact=compact)
            if pool:
                out.append("Pool ", style="bold")  # the run's budget, attempts included
                out.append(pool + "\n")
            if sample.gpus or not compact:
                out.append("Disk ", style="bold")
                out.append(f"workspace {gigabytes(sample.disk_workspace_mb)}\n")
        limits = state.limits
        if limits is not None:
            limit = limits.time_limit_s
            left = max(0.0, limit - elapsed_s)
            frac = elapsed_s / limit if limit else 0
            style = "red" if left < 0.1 * limit else "yellow" if left < 0.25 * limit else "cyan"
            out.append("Time ", style="bold")
            if state.finished is not None:
                # Nothing is left of a run that ended: the time it took, against its limit.
                out.append(f"{format_duration(elapsed_s)} in all", style="bold")
                out.append("\n" if compact else f" (limit {format_duration(limit)})\n", style="dim")
            elif compact:
                out.append(bar(frac, short), style=style)
                out.append(f" {format_duration(left)} left\n")
            else:
                out.append(bar(frac, width), style=style)
                out.append(
                    f"\n     {format_duration(elapsed_s)} of {format_duration(limit)}, {format_duration(left)} left\n"
                )
            steps = f"{state.steps}" + (f"/{limits.max_steps}" if limits.max_steps else "")
            about = "~" if state.estimated_tokens and state.cost_usd else ""
            spent = f"{about}${state.cost_usd:.2f}" + (
                f"/${limits.max_cost_usd:.2f}" if limits.max_cost_usd else ""
            )
            used = tokens(state.tokens, estimated=state.estimated_tokens > 0) + (
                f"/{tokens(limits.max_tokens)}" if limits.max_tokens else ""
            )
            if compact:
                out.append("Steps ", style="bold")
                out.append(f"{steps} · {spent}\n")
                if limits.max_tokens:
                    out.append("Tok  ", style="bold")
                    out.append(f"{used}\n")
            else:
                out.append("Steps  ", style="bold")
                out.append(steps.replace("/", " / ") + "\n")
                out.append("Tokens ", style="bold")
                out.append(used.replace("/", " / ") + "\n")
                out.append("Cost   ", style="bold")
                out.append(spent.replace("/", " / ") + "\n")
        context = context_gauge(state, short if compact else width - 8)
        if context is not None:
            out.append("Ctx  ", style="bold")
            out.append_text(context)
        held = state.paused or (state.phase == "awaiting_approval" and bool(self.breaks_hold))
        jobs = jobs_section(
            state,
            elapsed_s,
            compact=compact,
            last_line=self.job_last_line,
            width=inner,
            held=held,
        )
        if jobs is not None:
            if not out.plain.endswith("\n"):
                out.append("\n")
            out.append_text(jobs)
        out.rstrip()
        redraw(self, out)
