"""Key latency measured from outside, during an output flood: the live console
against a minimal Textual app, side by side (issue 15).

The in-process bench (`bench/console_load.py`) times a key from the app's own
event loop; a person sees more than that: the terminal delivering the key, the
app's loop getting round to it among the flood's work, the frame written back,
the terminal drawing it. So this bench stands where the person stands: two tmux
sessions on one tmux server,

  (a) `mlra run` on a live run (the scripted model server on loopback, the real
      OpenAI SDK, the local sandbox) whose worker runs a command printing about
      10,000 lines a second, and
  (b) a minimal Textual app that streams the same command's output into a Log
      widget and opens a help screen on the same key,

and for each round, in both sessions in turn (which goes first alternates), it
sends the help key with `tmux send-keys`, polls `tmux capture-pane` until the
help is on the screen, sends the key again (the help closes on it) and polls
until the help is gone. It prints the median and p90 of each, the ratio
mlra / minimal, and the machine's load before and after (the machine is shared:
a figure means something only beside its load).

    python bench/key_latency.py [--rounds 20] [--flood-seconds 75]

The minimal app is this file too: `python bench/key_latency.py --minimal`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SOCKET = f"mlra-keylat-{os.getpid()}"
"""A tmux server of the bench's own: it never touches anyone's tmux sessions."""
SIZE = (160, 48)
LINES_PER_WRITE = 100
WRITE_EVERY_S = 0.01
"""100 lines every 10 ms: about 10,000 lines a second, as a chatty training loop."""

FLOOD = """\
import sys, time
end = time.time() + {seconds}
i = 0
start = time.time()
last = 0.0
while time.time() < end:
    sys.stdout.write(''.join(f'step {{i + k}} loss 1.234 lr 3e-4 tokens/s 12345\\n' for k in range({per_write})))
    sys.stdout.flush()
    i += {per_write}
    time.sleep({every})
    if time.time() - last > 1:
        last = time.time()
        with open({rate_file!r}, 'w') as f:
            f.write(f'{{i}} {{last - start}}')
"""


def flood_code(seconds: float, rate_file: Path) -> str:
    """The flooding command; it writes its line count and elapsed time to `rate_file`
    every second, so the bench can say how fast each consumer let it print (a slow
    reader slows it down through the pipe)."""
    return FLOOD.format(
        seconds=seconds, per_write=LINES_PER_WRITE, every=WRITE_EVERY_S, rate_file=str(rate_file)
    )


# --- the minimal app ----------------------------------------------------------------


def run_minimal(seconds: float, rate_file: Path) -> None:
    """A Textual app with nothing but the flood in a Log and a help screen on `?`."""
    from textual import work
    from textual.app import App, ComposeResult
    from textual.binding import Binding
    from textual.containers import Vertical
    from textual.screen import ModalScreen
    from textual.widgets import Footer, Label, Log, Static

    class Help(ModalScreen[None]):
        BINDINGS = [Binding("escape,question_mark", "close", "Close")]
        DEFAULT_CSS = "Help { align: center middle; } Help > Vertical { width: 80; height: auto; border: thick $primary; }"

        def compose(self) -> ComposeResult:
            with Vertical():
                yield Label("minimal help")
                yield Static("\n".join(f"{k}  does something" for k in "abcdefghij"))

        def action_close(self) -> None:
            self.dismiss(None)

    class Minimal(App[None]):
        BINDINGS = [Binding("question_mark", "help", "Help"), Binding("q", "quit", "Quit")]

        def compose(self) -> ComposeResult:
            # Unbounded: Textual 8's Log with max_lines leaves its scroll past the pruned
            # end, and shows a blank pane (a flood of 75 s is some 70 MB of lines).
            yield Log()
            yield Footer()

        def on_mount(self) -> None:
            self.stream()

        def action_help(self) -> None:
            self.push_screen(Help())

        @work
        async def stream(self) -> None:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                flood_code(seconds, rate_file),
                stdout=asyncio.subprocess.PIPE,
            )
            assert process.stdout is not None
            log = self.query_one(Log)
            try:
                while chunk := await process.stdout.read(65536):
                    log.write(chunk.decode(errors="replace"))
            finally:
                if process.returncode is None:
                    process.kill()
                await process.wait()

    Minimal().run()


# --- the bench ----------------------------------------------------------------------


def tmux(*args: str) -> str:
    return subprocess.run(
        ["tmux", "-L", SOCKET, *args], check=True, capture_output=True, text=True
    ).stdout


@dataclass
class Session:
    name: str
    marker: str
    """Text that is on the screen exactly while the help is open."""
    rate_file: Path
    opened: list[float] = field(default_factory=list)
    closed: list[float] = field(default_factory=list)
    missed: int = 0
    cpu_s: float = 0.0
    """CPU seconds the app's own process (not the command it streams) used while measured."""

    def process(self) -> psutil.Process:
        return psutil.Process(
            int(tmux("list-panes", "-t", self.name, "-F", "#{pane_pid}").split()[0])
        )

    def cpu(self) -> float:
        times = self.process().cpu_times()
        return times.user + times.system

    def screen(self) -> str:
        return tmux("capture-pane", "-p", "-t", self.name)

    def wait(self, shown: bool, limit_s: float) -> float | None:
        start = time.perf_counter()
        while time.perf_counter() - start < limit_s:
            if (self.marker in self.screen()) == shown:
                return time.perf_counter() - start
        return None

    def press_and_wait(self, shown: bool, limit_s: float) -> float | None:
        start = time.perf_counter()
        tmux("send-keys", "-t", self.name, "?")
        if self.wait(shown, limit_s) is None:
            return None
        return time.perf_counter() - start

    def rate(self) -> str:
        try:
            lines, elapsed = self.rate_file.read_text().split()
            return f"{int(lines) / float(elapsed):,.0f} lines/s over {float(elapsed):.0f} s"
        except (OSError, ValueError):
            return "unknown"


def start_model_server(tmp: Path, seconds: float, rate_file: Path) -> subprocess.Popen[str]:
    """The scripted model server, as a person would start it by hand: the supervisor
    assigns the subtask, the worker runs the flood, then reports."""
    from tests.scripts import call, supervisor_answering, turn

    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("flood", call("python", code=flood_code(seconds, rate_file))),
            turn("", call("report", summary="ok")),
        ],
    }
    (tmp / "script.json").write_text(json.dumps(script))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.model_server", "--script", str(tmp / "script.json")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def openai_url(server: subprocess.Popen[str]) -> str:
    assert server.stdout is not None
    for line in server.stdout:
        if line.startswith("openai base URL:"):
            return line.split(":", 1)[1].strip()
    raise SystemExit("the scripted model server did not start")


def start_sessions(tmp: Path, seconds: float, url: str) -> tuple[Session, Session]:
    """Both apps in one tmux server of the bench's own, at the same terminal size."""
    mlra = Path(sys.executable).parent / "mlra"
    width, height = SIZE
    common = ["-d", "-x", str(width), "-y", str(height), "-c", str(ROOT)]
    tmux(
        "-f",
        "/dev/null",
        "new-session",
        *common,
        "-s",
        "mlra",
        f"{mlra} run tests/data/tasks/answer --model openai/bench --base-url {url} "
        f"--isolation none --runs-dir {tmp / 'runs'}",
    )
    tmux("set", "-g", "remain-on-exit", "on")  # an app that fails leaves its last screen
    tmux(
        "new-session",
        *common,
        "-s",
        "minimal",
        f"{sys.executable} {Path(__file__).resolve()} --minimal "
        f"--flood-seconds {seconds} --rate-file {tmp / 'minimal.rate'}",
    )
    return (
        Session("mlra", "mlra console", tmp / "mlra.rate"),
        Session("minimal", "minimal help", tmp / "minimal.rate"),
    )


def wait_for_flood(session: Session, limit_s: float = 60.0) -> None:
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        if "step " in session.screen() and session.rate_file.exists():
            return
        time.sleep(0.1)
    raise SystemExit(
        f"{session.name}: no flood on the screen after {limit_s:.0f} s:\n{session.screen()}"
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(rounds: int, seconds: float, gap_s: float) -> None:
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory(prefix="mlra-keylat-") as name, ExitStack() as cleanup:
        tmp = Path(name)
        server = start_model_server(tmp, seconds, tmp / "mlra.rate")
        cleanup.callback(server.wait)
        cleanup.callback(server.terminate)
        mlra, minimal = start_sessions(tmp, seconds, openai_url(server))
        cleanup.callback(stop_tmux, Path(tmux("display", "-p", "#{socket_path}").strip()))
        for session in (mlra, minimal):
            wait_for_flood(session)
        time.sleep(1.0)  # both at full flow
        flood_ends = time.monotonic() + seconds - 10
        started = time.monotonic()
        cpu = {s.name: s.cpu() for s in (mlra, minimal)}
        for i in range(rounds):
            if time.monotonic() > flood_ends:
                print(f"  the flood is ending: stopped after {i} rounds")
                break
            for session in (mlra, minimal) if i % 2 == 0 else (minimal, mlra):
                opened = session.press_and_wait(True, 10.0)
                closed = session.press_and_wait(False, 10.0) if opened is not None else None
                if opened is None or closed is None:
                    session.missed += 1
                    if session.marker in session.screen():
                        session.press_and_wait(False, 10.0)
                else:
                    session.opened.append(opened)
                    session.closed.append(closed)
                time.sleep(gap_s)
        wall = time.monotonic() - started
        for s in (mlra, minimal):
            s.cpu_s = s.cpu() - cpu[s.name]
        rates = {s.name: s.rate() for s in (mlra, minimal)}
        quit_all(mlra, minimal)
    print(f"load after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for session in (mlra, minimal):
        print(
            f"{session.name}: the flood printed {rates[session.name]}; the app used "
            f"{session.cpu_s / wall * 100:.0f}% of a core while measured"
        )
    report(mlra, minimal)


def stop_tmux(socket_path: Path) -> None:
    """Kill the bench's tmux server, then remove the socket file it leaves behind: in
    that order, since `kill-server` finds the server through that file."""
    subprocess.run(["tmux", "-L", SOCKET, "kill-server"], capture_output=True)
    socket_path.unlink(missing_ok=True)


def quit_all(mlra: Session, minimal: Session) -> None:
    """Quit both apps (the run is stopped, its command killed) before the server goes."""
    tmux("send-keys", "-t", mlra.name, "q")
    time.sleep(0.5)
    tmux("send-keys", "-t", mlra.name, "y")
    tmux("send-keys", "-t", minimal.name, "q")
    time.sleep(2.0)


def report(mlra: Session, minimal: Session) -> None:
    for what in ("opened", "closed"):
        row: dict[str, tuple[float, float]] = {}
        for session in (mlra, minimal):
            values: list[float] = getattr(session, what)
            if not values:
                print(f"  {session.name}: no help {what} within 10 s")
                return
            row[session.name] = (statistics.median(values), percentile(values, 0.9))
        (m_med, m_p90), (b_med, b_p90) = row["mlra"], row["minimal"]
        print(
            f"help {what}: mlra median {m_med * 1000:.0f} ms p90 {m_p90 * 1000:.0f} ms · "
            f"minimal median {b_med * 1000:.0f} ms p90 {b_p90 * 1000:.0f} ms · "
            f"ratio median {m_med / b_med:.2f} p90 {m_p90 / b_p90:.2f}"
        )
    both_m = [a + b for a, b in zip(mlra.opened, mlra.closed, strict=True)]
    both_b = [a + b for a, b in zip(minimal.opened, minimal.closed, strict=True)]
    print(
        f"open+close: mlra median {statistics.median(both_m) * 1000:.0f} ms, "
        f"minimal {statistics.median(both_b) * 1000:.0f} ms, "
        f"ratio {statistics.median(both_m) / statistics.median(both_b):.2f} "
        f"over {len(both_m)} and {len(both_b)} rounds "
        f"(missed: mlra {mlra.missed}, minimal {minimal.missed})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--flood-seconds", type=float, default=75.0)
    parser.add_argument(
        "--gap", type=float, default=0.3, help="seconds between one measurement and the next"
    )
    parser.add_argument("--minimal", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rate-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    # A bench stopped by `timeout` or kill still stops its model server and tmux server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if args.minimal:
        run_minimal(args.flood_seconds, args.rate_file)
        return
    measure(args.rounds, args.flood_seconds, args.gap)


if __name__ == "__main__":
    main()
