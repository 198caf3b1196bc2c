"""A run's metrics: what the controller, the job manager and the tool step feed.

Job output and command output are read line by line as they arrive (recorder.py);
metric files are read when the resource sampler has walked the workspace (its disk
figure's walk spots them, agent/loop/resources.py), so no poller of its own runs. All of it
goes to the log through the controller's `append`: the run's own observation, passed
over when a resumed run catches up with its log. A fault here is never the run's:
every entry point swallows its own errors.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

from mlra import events as ev
from mlra.agent.metrics.files import MetricFiles, Opener
from mlra.agent.metrics.recorder import MetricsRecorder


class RunMetrics:
    def __init__(
        self,
        append: Callable[[ev.Event], object],
        clock: Callable[[], float],
        open_beneath: Opener,
        *,
        flush_s: float | None = None,
    ) -> None:
        self._append = append
        self.recorder = (
            MetricsRecorder(append, clock)
            if flush_s is None
            else MetricsRecorder(append, clock, flush_s=flush_s)
        )
        self.files = MetricFiles(open_beneath, clock)
        self._paths: dict[str, None] = {}
        """Every metric file spotted so far (in the order found)."""
        self._reading = asyncio.Lock()

    def job_output(self, job: str, text: str) -> None:
        with contextlib.suppress(Exception):
            self.recorder.job_output(job, text)
            if self.recorder.notices:
                self._tell()

    def job_ended(self, job: str) -> None:
        with contextlib.suppress(Exception):
            self.recorder.job_ended(job)
            if self.recorder.notices:
                self._tell()

    def command_output(self, call_id: str, text: str) -> None:
        with contextlib.suppress(Exception):
            self.recorder.command_output(call_id, text)
            if self.recorder.notices:
                self._tell()

    def command_ended(self, call_id: str) -> None:
        with contextlib.suppress(Exception):
            self.recorder.command_ended(call_id)
            if self.recorder.notices:
                self._tell()

    async def sampled(self, paths: list[str]) -> None:
        """After a resource sample: read the metric files its walk found, and send
        whatever has waited long enough to the log."""
        await self.spotted(paths)
        with contextlib.suppress(Exception):
            self.recorder.flush(due_only=True)
            self._tell()

    async def spotted(self, paths: Iterable[str]) -> None:
        """Metric files a workspace walk found (the sampler's, or a snapshot's after a
        tool call): read what they hold since the last read."""
        for path in paths:
            # Cheap string tests first: a snapshot's index may hold a great many paths.
            if (
                ("metrics.jsonl" in path or "tfevents" in path)
                and path not in self._paths
                and self.files.follow(path)  # at most MAX_FILES, said once past it
            ):
                self._paths[path] = None
        with contextlib.suppress(Exception):
            await self.read_files()

    async def read_files(self) -> None:
        if not self._paths or self.recorder.closed:
            return
        async with self._reading:
            read = await asyncio.to_thread(self.files.read, list(self._paths))
            for found in read:
                self.recorder.add(
                    f"file:{found.path}",
                    found.kind,
                    found.readings,
                    path=found.path,
                    offset=found.offset,
                )
        self._tell()

    def _tell(self) -> None:
        """The notices the readers left (each said once by its reader)."""
        for notices in (self.files.notices, self.recorder.notices):
            while notices:
                self._append(ev.Notice(level="warning", message=notices.pop(0)))

    def load(self, recorded: Iterable[ev.Event]) -> None:
        """A resumed run: each metric file is read on from where the log says the
        earlier process had got, so its points are not recorded twice."""
        for event in recorded:
            if isinstance(event, ev.Metrics) and event.path and event.offset is not None:
                if self.files.resume(event.path, event.offset):
                    self._paths.setdefault(event.path)

    async def close(self) -> None:
        """The run is ending (its jobs stopped): the files' last lines and every
        source's waiting points go to the log; nothing is recorded after."""
        if self.recorder.closed:
            return
        with contextlib.suppress(Exception):
            await self.read_files()
        with contextlib.suppress(Exception):
            self.recorder.close()
            self._tell()


__all__ = ["RunMetrics"]
