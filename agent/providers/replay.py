"""`--model replay:RUN_DIR`: the model answers recorded in a run, played back in order.

Re-executing a run this way (after a change to a tool, a prompt or a sandbox)
is deterministic: the agent gets the same answers, so as long as it sends the
same requests it takes the same actions. Before each answer the request's
fingerprint is compared with the recorded one; at the first difference the
replay stops and says where and why: which step, and which tool result now
reads differently from the recording.
"""

from __future__ import annotations

from pathlib import Path

from mlra import events as ev
from mlra.agent.eventlog import EVENTS_FILE, LogDamage, read_events
from mlra.agent.fingerprint import normalize
from mlra.agent.providers.base import (
    ConfigError,
    Message,
    ModelProvider,
    ModelResponse,
    ProviderError,
    TextCallback,
)
from mlra.agent.recording import response_from
from mlra.tools.registry import ToolSpec


class ReplayDiverged(ProviderError):
    """The re-run asked something the recorded run did not."""


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ReplayProvider(ModelProvider):
    def __init__(self, run_dir: Path, events: list[ev.Event]) -> None:
        self.name = f"replay:{run_dir}"
        self.run_dir = run_dir
        self.calls: list[ev.ModelCall] = []
        self.steps: list[int] = []
        """The agent step each recorded call belongs to, for saying where a re-run diverged."""
        step = 0
        for event in events:
            if isinstance(event, ev.StepStarted):
                step = event.step
            elif isinstance(event, ev.ModelCall):
                self.calls.append(event)
                self.steps.append(step)
        self.results = {e.call_id: e for e in events if isinstance(e, ev.ToolResult)}
        started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
        self.context_window = (started.context_window if started else None) or 200_000
        self.replacements: list[tuple[str, str]] = []
        if started is not None:
            pairs = [(started.sandbox.workspace, "<workspace>"), (started.run_id, "<run>")]
            pairs.insert(0, (started.sandbox.workdir, "<workspace>"))
            self.replacements = sorted(pairs, key=lambda p: -len(p[0]))
        self.position = 0
        self.diverged: str | None = None

    @classmethod
    def from_spec(cls, spec: str) -> ReplayProvider:
        run_dir = Path(spec.removeprefix("replay:")).expanduser()
        path = run_dir / EVENTS_FILE
        if not path.is_file():
            raise ConfigError(f"{spec}: {run_dir} is not a run folder (no {EVENTS_FILE})")
        try:
            events = read_events(path)
        except LogDamage as exc:
            raise ConfigError(f"{spec}: {exc}") from None
        provider = cls(run_dir.resolve(), events)
        if not provider.calls:
            raise ConfigError(f"{spec}: the run has no recorded model calls to replay")
        return provider

    def _check_left(self) -> None:
        if self.position >= len(self.calls):
            raise ReplayDiverged(
                f"replay diverged after model call {len(self.calls)}: the recorded run made no "
                "further model calls"
            )

    def _where(self) -> str:
        call = self.calls[self.position]
        return f"model call {self.position + 1} ({call.agent}, step {self.steps[self.position]})"

    def expect(
        self, request_sha: str, messages: list[Message], replacements: list[tuple[str, str]]
    ) -> None:
        self._check_left()
        recorded = self.calls[self.position]
        if not recorded.request_sha or recorded.request_sha == request_sha:
            return
        self.diverged = self._explain(messages, replacements)
        raise ReplayDiverged(f"replay diverged at {self._where()}: {self.diverged}")

    def _explain(self, messages: list[Message], replacements: list[tuple[str, str]]) -> str:
        for message in messages:
            if message.role != "tool" or message.tool_call_id is None:
                continue
            then = self.results.get(message.tool_call_id)
            if then is None:
                continue
            old = normalize(then.output, self.replacements)
            new = normalize(message.content, replacements)
            if old != new:
                return (
                    f"the result of {then.tool} call {then.call_id} differs from the recording: "
                    f"recorded {_short(old)!r}, now {_short(new)!r}"
                )
        return "the request differs from the recorded one (a prompt or the history changed)"

    async def generate(
        self,
        *,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        on_text: TextCallback | None = None,
        max_tokens: int | None = None,
    ) -> ModelResponse:
        self._check_left()
        recorded = self.calls[self.position]
        self.position += 1
        if on_text is not None and recorded.text:
            on_text(recorded.text)
        return response_from(recorded)
