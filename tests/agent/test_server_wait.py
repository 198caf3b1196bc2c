"""A run waits out a model server that went away, instead of ending (issue 40).

Against the scripted server, through both providers (the real OpenAI and Anthropic
SDKs): one killed mid-answer (a stream's first piece, then the socket closed), and one
that stops answering in the middle of a run and comes back.
The run asks again after a wait, its clock paused, each wait a `model_retry` event
saying why; past `--server-wait` the failure says what happened and how long the run
waited, never "gave up after 4 retries" when none were made.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers.anthropic import AnthropicProvider
from mlra.agent.providers.base import ModelProvider, ServerGone
from mlra.agent.providers.openai import OpenAIProvider
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.state import RunState, fold
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.text.headless import TranscriptDisplay
from mlra.console.text.model_lines import retry_cause
from mlra.tasks.spec import load_task
from tests.fakes.model_server import Api, ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

WORKER = [
    turn("", call("bash", command="echo 42 > answer.txt")),
    turn("", call("report", summary="answer.txt holds 42")),
]


@pytest.fixture(params=["openai", "anthropic"])
def api(request: pytest.FixtureRequest) -> Api:
    return request.param


def _controller(
    tmp_path: Path,
    task: Path,
    server: ScriptedModelServer,
    api: Api,
    max_retries: int = 0,
    **settings: Any,
) -> tuple[RunController, ModelProvider]:
    # No SDK retries unless asked: the run's own waits are what is tested (and fast).
    url = server.url_for(api)
    provider: ModelProvider
    if api == "anthropic":
        provider = AnthropicProvider(
            "scripted", api_key="sk-test", base_url=url, max_retries=max_retries
        )
    else:
        provider = OpenAIProvider("scripted", api_key=None, base_url=url, max_retries=max_retries)
    config = RunConfig(
        task="answer",
        model=f"{api}/scripted",
        runs_dir=tmp_path,
        isolation="none",
        context_window=32_768,
        context_window_from="setting",
        review_every=1000,
        **settings,
    )
    return RunController(config, load_task(task), provider), provider


def _events(controller: RunController) -> list[ev.Event]:
    path = controller.run_dir / "events.jsonl"
    return read_events(path) if path.exists() else []


async def _until(controller: RunController, found: Any) -> list[ev.Event]:
    """Wait until the run's log holds an event `found` accepts (the log, not the clock)."""
    for _ in range(600):
        events = _events(controller)
        if any(found(e) for e in events):
            return events
        await asyncio.sleep(0.05)
    raise AssertionError("the event never came")


async def _outage(
    tmp_path: Path, task: Path, api: Api, back_when: Any, max_retries: int = 0
) -> list[ev.Event]:
    """A run whose server goes away once the supervisor has its first answer and comes
    back once the log holds an event `back_when` accepts; the run's log. Answers go by
    the history, as a model's do: a request cut off by the stop asks for the same again."""
    script = {"supervisor": supervisor_answering(), "worker": WORKER}
    server = ScriptedModelServer(script, turn_by_history=True).start()
    try:
        controller, provider = _controller(tmp_path, task, server, api, max_retries)
        running = asyncio.create_task(controller.run(agent_for))
        await _until(controller, lambda e: isinstance(e, ev.ModelCall))
        server.stop()
        await _until(controller, back_when)
        server.start()
        await asyncio.wait_for(running, 60)
        await provider.aclose()
    finally:
        server.stop()
    return _events(controller)


async def test_a_stream_cut_mid_answer_is_asked_again_after_a_wait(
    tmp_path: Path, answer_task: Path, api: Api
) -> None:
    script = {"supervisor": [{"drop": True}, *supervisor_answering()], "worker": WORKER}
    with ScriptedModelServer(script) as server:
        controller, provider = _controller(tmp_path, answer_task, server, api)
        await controller.run(agent_for)
        await provider.aclose()
        outcomes = [r.outcome for r in server.requests]
    events = _events(controller)
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert finished.reason == "submitted", finished.message
    assert outcomes[0] == "dropped" and outcomes[1] != "dropped"
    (retry,) = [e for e in events if isinstance(e, ev.ModelRetry)]
    assert (retry.agent, retry.cause, retry.wait_s) == ("supervisor", "connection_lost", 1.0)
    assert "connection was lost mid-answer; waiting 1s, clock paused" in retry_cause(
        retry.status, retry
    )
    # The server had read the prompt and begun to answer: that call is counted (as a
    # deadline's cut-off call is), no failure; before, its tokens were in no total.
    (cut,) = [e for e in events if isinstance(e, ev.ModelError)]
    assert (cut.cut_off, cut.fatal, cut.agent) == ("connection_lost", False, "supervisor")
    assert cut.input_tokens > 0 and cut.output_tokens > 0
    assert "the lost connection cut off supervisor's model call" in cut.error
    state = RunState()
    for event in events:
        state.apply(event)
    calls = [e for e in events if isinstance(e, ev.ModelCall)]
    assert state.output_tokens == sum(c.output_tokens for c in calls) + cut.output_tokens
    assert state.last_error is None


async def test_a_server_that_stops_answering_mid_run_is_waited_for(
    tmp_path: Path, answer_task: Path, api: Api
) -> None:
    # It comes back once the run says it waits for it.
    events = await _outage(
        tmp_path,
        answer_task,
        api,
        lambda e: isinstance(e, ev.ModelRetry) and e.cause == "not_answering",
    )
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert finished.reason == "submitted", finished.message
    waits = [e for e in events if isinstance(e, ev.ModelRetry)]
    # (A request in flight when it stopped was lost mid-answer; then nothing answered.)
    assert {e.cause for e in waits} <= {"connection_lost", "not_answering"}
    assert any(e.cause == "not_answering" for e in waits)
    assert [e.attempt for e in waits] == list(range(1, len(waits) + 1))
    assert not any(isinstance(e, ev.ModelError) for e in events)


async def test_a_server_answering_that_it_loads_its_model_is_waited_for(
    tmp_path: Path, answer_task: Path, api: Api
) -> None:
    """llama-server, restarted, answers HTTP 503 "Loading model" until its model is
    loaded: a server not there yet, waited for like one that refuses connections."""
    script = {"supervisor": supervisor_answering(), "worker": WORKER}
    server = ScriptedModelServer(script, turn_by_history=True).start()
    try:
        controller, provider = _controller(tmp_path, answer_task, server, api)
        running = asyncio.create_task(controller.run(agent_for))
        await _until(controller, lambda e: isinstance(e, ev.ModelCall))
        server.loading_model = True
        await _until(
            controller, lambda e: isinstance(e, ev.ModelRetry) and e.cause == "loading_model"
        )
        server.loading_model = False
        await asyncio.wait_for(running, 60)
        await provider.aclose()
    finally:
        server.stop()
    events = _events(controller)
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert finished.reason == "submitted", finished.message
    assert not any(isinstance(e, ev.ModelError) for e in events)
    retry = next(e for e in events if isinstance(e, ev.ModelRetry))
    assert "after the server is still loading its model; waiting 1s, clock paused" in (
        retry_cause(retry.status, retry)
    )
    assert any(r.outcome == "loading model" for r in server.requests)


async def test_a_server_gone_past_the_limit_ends_the_run_saying_what_happened(
    tmp_path: Path, answer_task: Path, api: Api
) -> None:
    server = ScriptedModelServer({}).start()
    server.stop()  # its address now refuses connections
    controller, provider = _controller(tmp_path, answer_task, server, api, server_wait_s=1.5)
    await controller.run(agent_for)
    await provider.aclose()
    events = _events(controller)
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert finished.reason == "provider_error"
    assert "is not answering" in finished.message
    assert "the run waited 2 s for the server and asked 3 times in all" in finished.message
    assert "gave up after" not in finished.message
    waits = [e.wait_s for e in events if isinstance(e, ev.ModelRetry)]
    assert waits == [1.0, pytest.approx(0.5, abs=0.1)]


async def test_a_server_killed_mid_answer_each_time_ends_the_run_saying_so(
    tmp_path: Path, answer_task: Path, api: Api
) -> None:
    script = {"supervisor": [{"drop": True, "times": 10}]}
    with ScriptedModelServer(script) as server:
        controller, provider = _controller(tmp_path, answer_task, server, api, server_wait_s=1.5)
        await controller.run(agent_for)
        await provider.aclose()
        outcomes = [r.outcome for r in server.requests if r.outcome]
    events = _events(controller)
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert finished.reason == "provider_error"
    assert "was lost mid-answer" in finished.message
    assert "the run waited 2 s for the server and asked 3 times in all" in finished.message
    assert "gave up after" not in finished.message and "(after" not in finished.message
    assert outcomes == ["dropped"] * 3  # the first call and the two tries after waits
    causes = [e.cause for e in events if isinstance(e, ev.ModelRetry)]
    assert causes == ["connection_lost", "connection_lost"]


async def test_the_sdk_retries_a_refused_connection_and_the_message_counts_them_once(
    tmp_path: Path, answer_task: Path, api: Api
) -> None:
    server = ScriptedModelServer({}).start()
    server.stop()
    controller, provider = _controller(
        tmp_path, answer_task, server, api, max_retries=1, server_wait_s=0.2
    )
    await controller.run(agent_for)
    await provider.aclose()
    events = _events(controller)
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert "is not answering" in finished.message
    # One count, of every request sent: the SDK's retry within each call included, not
    # the last call's "(after 1 retry)" beside the run's own tries.
    assert "and asked 4 times in all, its --server-wait limit" in finished.message
    assert "(after" not in finished.message and "gave up after" not in finished.message
    retries = [e for e in events if isinstance(e, ev.ModelRetry)]
    # Each call: the SDK's one retry (no cause), then the run's wait for the server.
    assert [e.cause for e in retries] == [None, "not_answering", None]


async def test_a_server_loading_its_model_is_waited_for(tmp_path: Path, answer_task: Path) -> None:
    """A real llama-server restarted mid-run answers HTTP 503 "Loading model" while it
    loads (and a proxy in front of it 502 while it is down): past the SDK's retries that
    was the run's end; it is waited out as a refused connection is, and said so."""
    down = {"status": 502, "message": "Bad Gateway"}
    loading = {"status": 503, "message": "Loading model"}
    script = {"supervisor": [down, loading, *supervisor_answering()], "worker": WORKER}
    with ScriptedModelServer(script) as server:
        controller, provider = _controller(tmp_path, answer_task, server, "openai")
        await controller.run(agent_for)
        await provider.aclose()
    events = _events(controller)
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert finished.reason == "submitted", finished.message
    waits = [e for e in events if isinstance(e, ev.ModelRetry)]
    assert [(e.cause, e.status, e.wait_s) for e in waits] == [
        ("not_ready", 502, 1.0),
        ("loading_model", 503, 2.0),
    ]
    assert "the server answered HTTP 502, not ready; waiting 1s, clock paused" in retry_cause(
        502, waits[0]
    )
    assert "the server is still loading its model; waiting 2s" in retry_cause(503, waits[1])
    assert not any(isinstance(e, ev.ModelError) for e in events)


async def test_the_sdk_s_retries_within_a_wait_are_said_by_the_wait(
    tmp_path: Path, answer_task: Path
) -> None:
    """A proxy answering 502 while its server is down: the SDK retries each call, and
    the run waits between calls. The transcript read as two counters (`retry 2/2 after
    502`, `retry 1 after ... waiting 1s`, `retry 1/2` again); the SDK's retries once the
    run waits are folded into the wait's line (the status line's too), and the log
    keeps each of them."""
    down = {"status": 502, "message": "Bad Gateway", "times": 6}
    script = {"supervisor": [down, *supervisor_answering()], "worker": WORKER}
    with ScriptedModelServer(script) as server:
        controller, provider = _controller(tmp_path, answer_task, server, "openai", 2)
        await controller.run(agent_for)
        await provider.aclose()
    events = _events(controller)
    retries = [e for e in events if isinstance(e, ev.ModelRetry)]
    assert [(e.attempt, e.cause, e.in_wait) for e in retries] == [
        (1, None, None),
        (2, None, None),
        (1, "not_ready", None),
        (1, None, 1),
        (2, None, 1),
        (2, "not_ready", None),
    ]
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    for event in events:
        display.on_event(event)
    lines = [line for line in out.getvalue().splitlines() if "retry" in line]
    assert [line.split("] ", 1)[1] for line in lines] == [
        "supervisor model retry 1/2 after 502",
        "supervisor model retry 2/2 after 502",
        "supervisor model retry 1 after the server answered HTTP 502, not ready; waiting 1s, "
        "clock paused",
        "supervisor model retry 2 after the server answered HTTP 502, not ready; waiting 2s, "
        "clock paused",
    ]
    inside = retries[4]  # the status line still says the wait, not "retry 2/2 after 502"
    assert fold([e for e in events if e.seq <= inside.seq]).retry == retries[2]


async def test_retries_once_the_server_is_back_are_printed(
    tmp_path: Path, answer_task: Path
) -> None:
    """The server comes back within the wait and answers 429: the SDK's retries of that
    are no longer the wait's (it was over), and are printed; they were hidden, the last
    line still saying the server was not ready."""
    down = {"status": 502, "message": "Bad Gateway", "times": 3}
    busy = {"status": 429, "message": "Too Many Requests", "times": 2}
    script = {"supervisor": [down, busy, *supervisor_answering()], "worker": WORKER}
    with ScriptedModelServer(script) as server:
        controller, provider = _controller(tmp_path, answer_task, server, "openai", 2)
        await controller.run(agent_for)
        await provider.aclose()
    events = _events(controller)
    retries = [e for e in events if isinstance(e, ev.ModelRetry)]
    assert [(e.attempt, e.status, e.cause, e.in_wait) for e in retries] == [
        (1, 502, None, None),
        (2, 502, None, None),
        (1, 502, "not_ready", None),
        (1, 429, None, None),
        (2, 429, None, None),
    ]
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    for event in events:
        display.on_event(event)
    lines = [line.split("] ", 1)[1] for line in out.getvalue().splitlines() if "retry" in line]
    assert lines[-2:] == [
        "supervisor model retry 1/2 after 429",
        "supervisor model retry 2/2 after 429",
    ]
    last = retries[-1]  # the status line says the 429's retry, not the wait over
    assert fold([e for e in events if e.seq <= last.seq]).retry == last


def test_a_hosted_api_s_503_is_not_waited_for() -> None:
    """Only a server at --base-url is waited for: the hosted API's 503 past the SDK's
    retries stays the provider's failure (its status pages are for that)."""
    from mlra.agent.providers.server_gone import failed_answer

    class Refused(Exception):
        status_code = 503

    hosted = failed_answer("openai/gpt", None, Refused(), "openai/gpt: HTTP 503")
    assert not isinstance(hosted, ServerGone)
    local = "http://127.0.0.1:8080/v1"
    gone = failed_answer("openai/q", local, Refused(), "openai/q: HTTP 503: overloaded")
    assert isinstance(gone, ServerGone) and gone.status == 503 and gone.cause == "not_ready"
    assert "not ready (loading its model" in str(gone)


async def test_the_sdk_s_own_retries_of_a_server_that_is_gone_are_off_the_clock(
    tmp_path: Path, answer_task: Path, api: Api
) -> None:
    """In an outage the SDK retries before the run's own wait begins: those retries
    counted on the run's clock (about 11 s in 30, while the batch's line said "clock
    paused"). From the first, the clock stands still until the server answers."""
    # (A request in flight as it stopped is lost mid-answer, which the SDK does not
    # retry: the server comes back once the SDK has retried a call twice.)
    events = await _outage(
        tmp_path, answer_task, api, lambda e: _sdk_retry(e) and getattr(e, "attempt", 0) == 2, 2
    )
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert finished.reason == "submitted", finished.message
    sdk = [e for e in events if isinstance(e, ev.ModelRetry) and _sdk_retry(e)]
    second = next(e for e in sdk if e.attempt == 2)
    first = sdk[sdk.index(second) - 1]
    # The SDK waits at least 0.375 s before its second retry: the clock did not move.
    assert first.attempt == 1 and second.t == first.t


def _sdk_retry(e: ev.Event) -> bool:
    return isinstance(e, ev.ModelRetry) and e.wait_s is None and e.status is None


async def test_retries_after_a_read_timed_out_stay_on_the_clock(
    tmp_path: Path, answer_task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that is there and slow is not gone: the SDK's retry after its read timed
    out counts on the run's clock (only a try that failed sooner is an absence)."""
    from mlra.agent.loop import server_wait

    monkeypatch.setattr(server_wait, "ABSENT_WITHIN_S", 0.9)  # reads time out after 1 s
    script = {"supervisor": [{"hang": 5.0}, {"hang": 5.0}], "worker": WORKER}
    with ScriptedModelServer(script) as server:
        provider = OpenAIProvider(
            "scripted", api_key=None, base_url=server.url_for("openai"), max_retries=1,
            timeout_s=1.0,
        )  # fmt: skip
        controller, _ = _controller(tmp_path, answer_task, server, "openai")
        controller.provider = provider
        await controller.run(agent_for)
        await provider.aclose()
    events = _events(controller)
    (error,) = [e for e in events if isinstance(e, ev.ModelError)]
    assert "no answer from" in error.error and "within 1 s" in error.error, error.error
    assert error.t >= 2.0  # both reads' time-outs, not the first alone
