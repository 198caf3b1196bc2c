"""`--model replay:RUN_DIR`: the model answers recorded in a run, played back in order.

Re-executing a run this way (after a change to a tool, a prompt or a sandbox)
is deterministic: the agent gets the same answers, so as long as it sends the
same requests it takes the same actions. Before each answer the request's
fingerprint is compared with the recorded one; at the first difference the
replay stops and says where and why: which step, and which tool result now
reads differently from the recording, with the lines that differ.

Output that changes from one run to the next with no change in behaviour
(timings, `it/s` rates, dates, the times `ls -la` shows, progress bars redrawn
a different number of times) is not a difference: a tool result that differs
from the recording only there counts as the recording's. And a recording that
simply runs out, because the recorded run ended at its deadline, on a budget or
by its user's stop, ends the replay the same way rather than as an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mlra import events as ev
from mlra.agent.loop.attempt_finish import no_time_at_limit, validating_at_limit
from mlra.agent.loop.ending import EndedBy, Ending, EndRun, unfinished_recording
from mlra.agent.loop.fingerprint import (
    by_the_old_rule,
    normalize,
    request_fingerprint,
    run_names,
)
from mlra.agent.loop.replay_diff import first_changed_line, short_diff, steady
from mlra.agent.providers.base import (
    ConfigError,
    Message,
    ModelProvider,
    ModelResponse,
    ProviderError,
    TextCallback,
    ToolCallRequest,
)
from mlra.agent.providers.text_calls import FALLBACK_MARK, REFUSED_NATIVE
from mlra.agent.record.eventlog import EVENTS_FILE, LogDamage, read_events
from mlra.agent.record.recording import response_from
from mlra.agent.record.run_lookup import NoSuchRun, find_run
from mlra.durations import format_duration
from mlra.tools.registry import ToolSpec

if TYPE_CHECKING:
    from mlra.agent.providers.table import ProviderRequest

T = TypeVar("T")
_RAN_OUT: dict[ev.FinishReason, tuple[EndedBy, str]] = {
    "deadline": ("deadline", "the recorded run reached its time limit"),
    "budget": ("budget", "the recorded run used up a budget"),
    "stopped": ("stop", "the recorded run was stopped by its user"),
}
"""How a recording can run out without the recorded agent having ended it: the
replay ends the same way, and says so."""


class ReplayDiverged(ProviderError):
    """The re-run asked something the recorded run did not."""


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ReplayProvider(ModelProvider):
    def __init__(self, run_dir: Path, events: list[ev.Event]) -> None:
        self.name = f"replay:{run_dir}"
        self.spec = self.name
        """The recording as a run records its `--model`: named in full (an id's start the
        user typed would name the replay itself, or another run, to a later resume)."""
        self.run_dir = run_dir
        self.calls: list[ev.ModelCall] = []
        self.steps: list[int] = []
        """The agent step each recorded call belongs to, for saying where a re-run diverged."""
        self.prompts: list[str | None] = []
        """The prompt of the turn each recorded call answered (None for summaries and
        reviews): shown beside the re-run's where a changed prompt made it diverge."""
        step = 0
        prompts: dict[str, str] = {}
        for event in events:
            if isinstance(event, ev.StepStarted):
                step = event.step
                prompts[event.agent] = event.prompt
            elif isinstance(event, ev.ModelCall):
                self.calls.append(event)
                self.steps.append(step)
                turn = event.purpose == "turn"
                self.prompts.append(prompts.pop(event.agent, None) if turn else None)
        self.results = {e.call_id: e for e in events if isinstance(e, ev.ToolResult)}
        self.decisions: dict[str, list[tuple[str, Any, ev.Control]]] = {}
        """The user's edits and rejections at breakpoints, by call id, each with the call
        it decided as the model asked it (tool, arguments), in order: the recorded run
        ran each call so, and so does the replay (an approval changes nothing to
        replay). A server that sends no call ids has `call_0` in every answer, so a
        decision goes only to the call asked as it was, and to one call only."""
        asked: dict[str, tuple[str, Any]] = {}
        self.refusals: dict[str, list[tuple[str, Any, str]]] = {}
        """The calls the recording's tools refused for their arguments, by call id, each
        with the call as asked and the tool's words, in order (as `decisions`)."""
        for e in events:
            if isinstance(e, ev.ToolCall):
                asked[e.call_id] = (e.tool, e.arguments)
                if e.refused:
                    self.refusals.setdefault(e.call_id, []).append((e.tool, e.arguments, e.refused))
            elif (
                isinstance(e, ev.Control)
                and e.call_id in asked
                and (e.action == "reject" or (e.action == "edit" and e.arguments is not None))
            ):
                tool, arguments = asked[e.call_id]
                self.decisions.setdefault(e.call_id, []).append((tool, arguments, e))
        started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
        self.context_window = (started.context_window if started else None) or 200_000
        self.limits: ev.Limits | None = started.limits if started is not None else None
        """The recorded run's limits: the prompts state them, so a replay that is to
        match its recording runs under them unless told otherwise."""
        self.agent = str(started.config.get("agent") or "supervisor") if started else None
        """The recorded run's `--agent`, which a replay follows unless told otherwise."""
        self.replacements: list[tuple[str, str]] = []
        if started is not None:
            self.replacements = run_names(started.sandbox.workdir, started.sandbox.workspace)
        ends = [i for i, e in enumerate(events) if isinstance(e, ev.RunFinished)]
        self.finished: ev.RunFinished | None = None
        """How the recorded run ended (its last ending, if it was resumed); None if it never did."""
        self._evaluated = False
        if ends:
            last = events[ends[-1]]
            assert isinstance(last, ev.RunFinished)
            # An attempt's recording ends "attempt_ended" (older ones "submitted"): it
            # ran out with its worker done, which a replay that asks on diverged from.
            self.finished = ev.as_read(last, attempt=started is not None and started.is_attempt)
            self._evaluated = any(
                isinstance(e, ev.EvaluationStarted)
                for e in events[ends[-2] + 1 if len(ends) > 1 else 0 : ends[-1]]
            )
        last = next((e for e in reversed(events) if isinstance(e, ev.Submission)), None)
        self.promoted = last if last is not None and last.by == "user" else None
        """The person's promotion of a search's attempt (`p`) that ended the recorded run:
        the recording runs out there, and the replay promotes it too."""
        self.raises: dict[str, float] = {}
        """The limit each of a search's attempts was last raised to (`attempt_started.
        raised`): a replay's raises fall as its own timing has them, and one that fell
        lower cut an attempt off before its recording ran out (`for_attempt`)."""
        self.stops: dict[str, str] = {}
        """By what each of a search's attempts was stopped, as its search's log says (its own
        log says only that its run was cancelled: `for_attempt`), as the words that end
        "the recording stops here, after model call 3": `, by the supervisor`."""
        promoting: str | None = None
        for event in events:
            if isinstance(event, ev.AttemptStarted):
                self.raises.update(event.raised)
            elif isinstance(event, ev.Control) and event.action == "promote":
                promoting = event.target
            elif isinstance(event, ev.AttemptFinished) and event.status == "stopped":
                by = event.why.removeprefix("stopped ")  # "stopped by the supervisor"
                by = f"by the promotion of attempt {promoting}" if promoting else by
                self.stops[event.attempt] = f", {by}" if by.startswith("by ") else f" ({by})"
            elif isinstance(event, ev.AttemptFinished) and event.run_deadline:
                self.stops[event.attempt] = ", by the run's time limit"  # not "by its user"
        self.raised_to: float | None = None
        """For an attempt's recording: the limit its search's recording raised it to."""
        self.stopped: str | None = None
        """For an attempt's recording stopped by its search: by what (`stops`)."""
        self.at_limit = any(validating_at_limit(e) or no_time_at_limit(e) for e in events)
        """Whether the recorded attempt reached its own limit (its closing validation
        begun, or no time left for one; by the notices' words in a recording from
        before their kinds): where its search stopped it first, a replay that reaches
        the limit sooner adds none (agent/agents/closing_validation.py)."""
        self.position = 0
        self.diverged: str | None = None
        self._expected: tuple[str, list[tuple[str, str]]] | None = None
        self._told_text_tools = False
        self._fell_back = any(
            isinstance(e, ev.Notice) and FALLBACK_MARK in e.message for e in events
        )
        config = started.config if started is not None else {}
        self._mode = str(config.get("tool_calls") or "auto")
        self._refused = any(
            isinstance(e, ev.Notice) and REFUSED_NATIVE in e.message for e in events
        )
        """The server refused native tools at the run's first request: text from the start."""
        self._read_text = self._mode == "text" or (
            self._mode == "auto" and (bool(config.get("base_url")) or self._refused)
        )

    @classmethod
    def from_spec(cls, spec: str) -> ReplayProvider:
        """`replay:RUN`: a run folder, or a run's id or the start of one, in ./runs or in
        the folder it names (`replay:runs/20261201-0203`), as `mlra replay` takes it."""
        try:
            run_dir = find_run(str(Path(spec.removeprefix("replay:")).expanduser()), Path("runs"))
        except NoSuchRun as exc:
            raise ConfigError(f"{spec}: {exc}") from None
        provider = cls.from_folder(run_dir, spec)
        provider.spec = f"replay:{run_dir}"
        return provider

    @classmethod
    def from_folder(cls, run_dir: Path, spec: str) -> ReplayProvider:
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

    def for_attempt(self, attempt: str) -> ReplayProvider:
        """An attempt answered from its own recording (`attempts/<id>/`): its worker's
        calls are in its log, not the search's, whose provider, shared, made a search's
        replay diverge at its first worker's call. ConfigError where it has none."""
        folder = self.run_dir / "attempts" / attempt
        provider = ReplayProvider.from_folder(folder, f"replay:{folder}")
        provider.raised_to = self.raises.get(attempt)
        provider.stopped = self.stops.get(attempt)
        return provider

    def recorded_result(self, call_id: str) -> ev.ToolResult | None:
        return self.results.get(call_id)

    def recorded_decision(self, call: ToolCallRequest) -> ev.Control | None:
        return _take(self.decisions, call)

    def recorded_refusal(self, call: ToolCallRequest) -> str | None:
        return _take(self.refusals, call)

    def answered_from_log(self) -> None:
        """A resumed replay's log holds the answers up to where it stopped, each the
        recording's in turn: its catch-up takes them from there, and the live part goes
        on from the recorded call after them."""
        self.position = min(self.position + 1, len(self.calls))

    def recorded_time_limit(self) -> float | None:
        return self.limits.time_limit_s if self.limits is not None else None

    def recorded_deadline(self) -> float | None:
        return self.raised_to

    def describe_tools_in_prompt(self) -> bool:
        """The answers are the recording's, whatever the prompt: a replay falls back (and
        says so) where its recording did, found from the recording's notice."""
        told, self._told_text_tools = self._told_text_tools, True
        return self._fell_back and not told

    def reads_text_calls(self) -> bool:
        """As the recorded run's provider read them: its `--tool-calls` and base URL."""
        return self._read_text

    def tools_in_prompt(self) -> bool:
        return self._mode == "text" or self._refused or (self._fell_back and self._told_text_tools)

    def _check_left(self) -> None:
        """At the end of the recording: end the replay as the recorded run ended, when
        that was not the agent's doing; a recorded run that went on is a divergence."""
        if self.position < len(self.calls):
            return
        done = f"after model call {len(self.calls)}"
        end = self.finished
        if end is None or end.cause == "recording_unfinished":  # killed, or its replay's
            raise EndRun(unfinished_recording(done))
        if end.reason in _RAN_OUT:
            by, why = _RAN_OUT[end.reason]
            detail = f" ({end.message})" if end.message and end.reason == "budget" else ""
            message = (
                f"the recording ends here, {done}: {why}{detail}; the replay ends the same way"
            )
            if end.reason == "stopped" and self.stopped:  # an attempt's, by its search
                # Its line reads "attempt a2 stopped: <this>": said once.
                message = f"the recording stops here, {done}{self.stopped}"
            raise EndRun(
                Ending(
                    reason=end.reason,
                    status=end.status,
                    by=by,
                    evaluate=self._evaluated,
                    message=message,
                )
            )
        attempt = self.promoted.attempt if self.promoted is not None else None
        if end.reason == "submitted" and self.promoted is not None and attempt is not None:
            message = (
                f"the recording ends here, {done}: the recorded run's user promoted attempt "
                f"{attempt} here; the replay promotes it too"
            )
            note = self.promoted.note or f"attempt {attempt} promoted by the user"
            ending = Ending("submitted", by="user", attempt=attempt, note=note, message=message)
            raise EndRun(ending)
        if end.cause == "window_overflow":  # no provider's failure: as final as it was
            message = f"{end.message}; the recording ends here, {done}: the replay ends so too"
            raise EndRun(
                Ending("provider_error", "error", False, "error", message=message, cause=end.cause)
            )
        if end.reason in ("error", "provider_error"):
            raise ProviderError(
                f"the recording ends here, {done}: the recorded run failed at this point "
                f"({_short(end.message)})"
            )
        raise ReplayDiverged(
            f"replay diverged {done}: the agent asks the model again, but the recorded run "
            f"made no further model calls (it ended: {end.reason}"
            + (f", {_short(end.message)})" if end.message else ")")
        )

    def _where(self) -> str:
        call = self.calls[self.position]
        return f"model call {self.position + 1} ({call.agent}, step {self.steps[self.position]})"

    def expect(
        self, request_sha: str, messages: list[Message], replacements: list[tuple[str, str]]
    ) -> None:
        """Noted here, compared in `generate`, which has the whole request: a request
        that differs only in volatile tool output is checked with the recorded outputs
        put in, and that needs the system prompt and the tools."""
        self._check_left()
        self._expected = (request_sha, replacements)

    def _check_request(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> None:
        expected, self._expected = self._expected, None
        recorded = self.calls[self.position]
        if expected is None or not recorded.request_sha or recorded.request_sha == expected[0]:
            return
        replacements = expected[1]
        if self._as_recorded(recorded.request_sha, system, messages, tools, replacements):
            return
        as_recorded: list[Message] = []
        changed: tuple[ev.ToolResult, str, str] | None = None
        for message in messages:
            then = self.results.get(message.tool_call_id or "") if message.role == "tool" else None
            if then is not None:
                old = normalize(then.output, self.replacements)
                new = normalize(message.content, replacements)
                if old != new and steady(old) == steady(new):
                    message = message.model_copy(update={"content": old})
                elif old != new and changed is None:
                    changed = (then, old, new)
            as_recorded.append(message)
        if changed is None:
            if self._as_recorded(recorded.request_sha, system, as_recorded, tools, replacements):
                return  # only volatile output (timings, dates) differs from the recording
            self.diverged = self._prompt_difference(messages, replacements)
        else:
            then, old, new = changed
            self.diverged = (
                f"the result of {then.tool} call {then.call_id} differs from the recording: "
                f"{short_diff(old, new)}"
            )
        raise ReplayDiverged(f"replay diverged at {self._where()}: {self.diverged}")

    def _as_recorded(
        self,
        sha: str,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        replacements: list[tuple[str, str]],
    ) -> bool:
        """Whether a request's fingerprint is the recorded `sha`, by the rule of now or by
        the one a recording made before 2026-12-01 had (`by_the_old_rule`): it left the
        run's id out as a word too, and such a recording is to replay as it did then."""
        old = by_the_old_rule(replacements, self.replacements)
        for names, whole in ((replacements, True), (old, False)):
            if request_fingerprint(system, messages, tools, names, whole_names=whole)[0] == sha:
                return True
        return False

    def limits_difference(self, now: ev.Limits) -> str:
        """The limits this re-run has that differ from the recording's (the prompts state
        them, so they are a divergence's likely cause), or "" where they are the same."""
        then = self.limits
        if then is None:
            return ""
        parts = []
        if now.time_limit_s != then.time_limit_s:
            parts.append(
                f"time limit {format_duration(now.time_limit_s)} "
                f"(recorded {format_duration(then.time_limit_s)})"
            )
        for name in ("max_steps", "max_cost_usd", "max_tokens"):
            a, b = getattr(now, name), getattr(then, name)
            if a != b:
                parts.append(f"{name.replace('_', ' ')} {a} (recorded {b})")
        if not parts:
            return ""
        return "; the re-run's limits differ from the recording's: " + ", ".join(parts)

    def _prompt_difference(
        self, messages: list[Message], replacements: list[tuple[str, str]]
    ) -> str:
        """What differs, where a tool result does not: this turn's prompt against the
        recorded one, as a short diff; else an earlier message or the system prompt,
        which the recording does not keep whole."""
        then = self.prompts[self.position]
        users = [m for m in messages if m.role == "user"]
        if then is not None and users:
            old = normalize(then, self.replacements)
            new = normalize(users[-1].content, replacements)
            if old != new:
                diff = short_diff(old, new) or first_changed_line(old, new)
                return f"this turn's prompt differs from the recording: {diff}"
        return (
            "the request differs from the recorded one, though this turn's prompt and the "
            "tool results are the same: the system prompt, the task's instructions or the "
            "tools changed (the recording keeps no copy of them to compare)"
        )

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
        self._check_request(system, messages, tools)
        recorded = self.calls[self.position]
        self.position += 1
        if on_text is not None and recorded.text:
            on_text(recorded.text)
        return response_from(recorded)


def replay(request: ProviderRequest) -> ReplayProvider:
    """The providers' table entry `replay:RUN_DIR` (agent/providers/table.py)."""
    return ReplayProvider.from_spec(request.spec)


def _take(recorded: dict[str, list[tuple[str, Any, T]]], call: ToolCallRequest) -> T | None:
    """The first entry recorded for the call as asked (no call ids: `call_0` in each)."""
    pending = recorded.get(call.id, [])
    for index, (tool, arguments, entry) in enumerate(pending):
        if tool == call.name and arguments == call.arguments:
            del pending[index]
            return entry
    return None
