"""The Resources pane: GPUs (or plainly "no GPU"), CPU, RAM and the workspace's
disk use from the run's resource samples; the clock against the deadline; steps,
tokens and cost against their limits."""

from __future__ import annotations

from collections import deque
from typing import Unpack

from rich.text import Text
from textual.widgets import Static

from mlra import events as ev
from mlra.agent.state import RunState
from mlra.console.panes import WidgetOptions, redraw
from mlra.durations import format_duration

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


def tokens(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1_000_000 else f"{n / 1e3:.1f}k" if n >= 1000 else str(n)


class ResourcesPane(Static):
    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self._cpu: deque[float] = deque(maxlen=HISTORY)
        self._gpu: dict[int, deque[float]] = {}
        self._shown: tuple[RunState, float] | None = None

    def on_mount(self) -> None:
        self.border_title = "Resources"

    def on_resize(self) -> None:
        # The bars are as wide as the pane: drawn before the layout settled (or
        # before the terminal was resized) they would not fit until the next sample.
        if self._shown is not None:
            self.show(*self._shown)

    def feed(self, event: ev.Event) -> None:
        if isinstance(event, ev.ResourceSample):
            self._cpu.append(event.cpu_percent)
            for gpu in event.gpus:
                self._gpu.setdefault(gpu.index, deque(maxlen=HISTORY)).append(gpu.util_percent)

    def clear(self) -> None:
        """Forget the sparklines' history: a replay feeds that of another point of the run."""
        self._cpu.clear()
        self._gpu.clear()

    def show(self, state: RunState, elapsed_s: float) -> None:
        self._shown = (state, elapsed_s)
        inner = self.size.width or 40
        width = max(10, inner - 20)
        short = 8 if inner < 40 else 10
        out = Text()
        sample = state.resources
        if sample is None:
            out.append("waiting for the first sample…\n", style="dim")
        else:
            if sample.gpus:
                for gpu in sample.gpus:
                    util = gpu.util_percent
                    out.append(f"GPU{gpu.index} ", style="bold")
                    out.append(f"{bar(util / 100, short)} {util:3.0f}%  ", style="green")
                    out.append(
                        f"mem {gigabytes(gpu.mem_used_mb)} / {gigabytes(gpu.mem_total_mb)}\n"
                    )
                    out.append(
                        f"     {gpu.name}  {spark(self._gpu.get(gpu.index, deque()), width)}\n",
                        style="dim",
                    )
            else:
                out.append("GPU  ", style="bold")
                out.append("no GPU\n", style="dim")
            out.append("CPU  ", style="bold")
            out.append(
                f"{bar(sample.cpu_percent / 100, short)} {sample.cpu_percent:3.0f}%  ",
                style="green",
            )
            out.append(spark(self._cpu, max(5, width - 8)) + "\n", style="dim")
            out.append("RAM  ", style="bold")
            frac = sample.ram_used_mb / sample.ram_total_mb if sample.ram_total_mb else 0
            out.append(
                f"{bar(frac, short)} {gigabytes(sample.ram_used_mb)}/{gigabytes(sample.ram_total_mb)}\n"
            )
            out.append("Disk ", style="bold")
            out.append(f"workspace {gigabytes(sample.disk_workspace_mb)}\n")
        limits = state.limits
        if limits is not None:
            limit = limits.time_limit_s
            left = max(0.0, limit - elapsed_s)
            frac = elapsed_s / limit if limit else 0
            style = "red" if left < 0.1 * limit else "yellow" if left < 0.25 * limit else "cyan"
            out.append("Time ", style="bold")
            out.append(bar(frac, width), style=style)
            out.append(
                f"\n     {format_duration(elapsed_s)} of {format_duration(limit)}, {format_duration(left)} left\n"
            )
            out.append("Steps  ", style="bold")
            out.append(
                f"{state.steps}" + (f" / {limits.max_steps}" if limits.max_steps else "") + "\n"
            )
            out.append("Tokens ", style="bold")
            out.append(
                tokens(state.tokens)
                + (f" / {tokens(limits.max_tokens)}" if limits.max_tokens else "")
                + "\n"
            )
            out.append("Cost   ", style="bold")
            out.append(
                f"${state.cost_usd:.2f}"
                + (f" / ${limits.max_cost_usd:.2f}" if limits.max_cost_usd else "")
            )
        redraw(self, out)
