"""A request a server refused as too long is never sent again as it was (issue 40).

Against the scripted server answering as llama-server, vLLM, llama-cpp-python and
Ollama answer a request longer than their window (each one's own error body, with its
numbers): what mlra sends next is smaller by at least the excess the server stated,
first by summarizing the oldest turns (the first answer too, when it is the only one),
then by cutting outputs and the answer's budget; where nothing can make it so, the run
ends in one line naming the window and the request's size. Checked from the fake
server's own request log, as a logging proxy in front of a real server would show it.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import ModelSettings, resolve_model
from mlra.agent.providers.overflow import stated_overflow
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.text.model_lines import learned_window_line
from mlra.tasks.spec import load_task
from tests.fakes.model_server import RecordedRequest, ScriptedModelServer
from tests.scripts import call, plan, supervisor_answering, turn

STYLES: dict[str, tuple[str, bool]] = {
    "llama-server": ("llama_server_ctx", False),
    "vllm": ("context_limit", True),
    "llama-cpp-python": ("llama_cpp_python_window", True),
    "ollama": ("ollama_ctx", False),
}
"""Each server's option on the fake, and whether it counts the answer's budget."""


async def _run(
    tmp_path: Path,
    task: Path,
    script: dict[str, Any],
    options: dict[str, int],
    *,
    window: int = 32_768,
) -> tuple[list[ev.Event], list[RecordedRequest]]:
    """A whole run against the fake, mlra taking the window for 32,768 tokens (the server
    tells none, or the user said so), as in the runs the issue reports."""
    with ScriptedModelServer(script, **options) as server:  # pyright: ignore[reportArgumentType]
        provider = resolve_model(
            "openai/test",
            base_url=server.url_for("openai"),
            env={},
            settings=ModelSettings(context_window=window),
        )
        config = RunConfig(
            task="answer",
            model="openai/test",
            runs_dir=tmp_path,
            isolation="none",
            context_window=window,
            context_window_from="setting",
            max_output_tokens=provider.max_output_tokens,
            review_every=1000,
        )
        controller = RunController(config, load_task(task), provider)
        await controller.run(agent_for)
        await provider.aclose()
        events = read_events(controller.run_dir / "events.jsonl")
        return events, list(server.requests)


def _counted(request: RecordedRequest, answer_counts: bool) -> int:
    """The request's size as the fake server counts it."""
    body = request.body
    wanted = int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
    return request.size // 4 + (wanted if answer_counts else 0)


def _assert_never_repeated(
    requests: list[RecordedRequest], window: int, answer_counts: bool
) -> int:
    """No two requests in a row alike; after each refusal with numbers, the role's next
    request is smaller by at least the stated excess (so it fits). Returns the refusals."""
    bodies = [json.dumps(r.body, sort_keys=True) for r in requests]
    assert all(a != b for a, b in itertools.pairwise(bodies))
    refused = 0
    for index, request in enumerate(requests):
        if request.outcome != "status 400":
            continue
        refused += 1
        size = _counted(request, answer_counts)
        excess = size - window
        assert excess > 0
        later = [r for r in requests[index + 1 :] if r.role == request.role]
        assert later, f"the {request.role}'s refused request was never mended"
        assert _counted(later[0], answer_counts) <= size - excess
    return refused


@pytest.mark.parametrize("style", list(STYLES))
async def test_a_refused_request_is_sent_again_smaller_by_what_the_server_said(
    tmp_path: Path, answer_task: Path, style: str
) -> None:
    # Each step prints 3,000 characters: the worker's request outgrows the server's
    # 9,000 tokens while mlra takes the window for 32k.
    worker = [
        turn(f"step {n}", call("python", code=f"print('{'abcdefg'[n - 1]}' * 3000)"))
        for n in range(1, 8)
    ]
    worker += [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]
    script = {
        "supervisor": supervisor_answering(),
        "worker": worker,
        "summarizer:fallback": "SUMMARY: printed digits",
    }
    option, answer_counts = STYLES[style]
    events, requests = await _run(tmp_path, answer_task, script, {option: 9000})
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert finished.reason == "submitted", finished.message
    assert _assert_never_repeated(requests, 9000, answer_counts) >= 1
    (learned,) = [e for e in events if isinstance(e, ev.ContextWindowLearned)]
    assert (learned.context_window, learned.assumed) == (9000, 32_768)
    assert learned.smallest is not None and learned.smallest < 9000
    assert "pass --context-window 9000" in learned_window_line(learned)
    told = [e.message for e in events if isinstance(e, ev.Notice)]
    assert any("made smaller by about" in m for m in told)
    assert any(isinstance(e, ev.HistorySummarized) and e.agent == "worker" for e in events)
    assert not any(isinstance(e, ev.ModelError) for e in events)


async def test_a_first_answer_alone_is_summarized_when_the_second_request_overflows(
    tmp_path: Path, answer_task: Path
) -> None:
    """The issue's SmolLM2 run: the second request was over, with the first answer there
    to summarize; only the answer's budget was cut, and it failed."""
    long_first = "Thinking about the plan. " * 500  # a small model's long musing
    script = {
        "supervisor": [
            turn(long_first, plan("Answer the question", "Submit")),
            *supervisor_answering()[1:],
        ],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
        "summarizer:fallback": "SUMMARY: planned to answer and submit",
    }
    # The supervisor's first request, as the server counts it, decides the window: its
    # second (first answer and the plan's result added) passes it by some hundreds.
    _, sized = await _run(tmp_path / "sizing", answer_task, script, {})
    supervisor = [r.size // 4 for r in sized if r.role == "supervisor"]
    worker = next(r for r in sized if r.role == "worker").size // 4
    window = max(supervisor[0], worker) + 300
    assert supervisor[1] > window
    events, requests = await _run(tmp_path, answer_task, script, {"llama_server_ctx": window})
    assert _assert_never_repeated(requests, window, answer_counts=False) >= 1
    summaries = [e for e in events if isinstance(e, ev.HistorySummarized)]
    assert any((s.agent, s.first_turn, s.last_turn) == ("supervisor", 1, 1) for s in summaries), (
        "the supervisor's only earlier turn was summarized"
    )
    told = " ".join(e.message for e in events if isinstance(e, ev.Notice))
    assert "nothing old is left" not in told
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert finished.reason == "submitted", finished.message


async def test_a_request_that_cannot_be_made_small_enough_ends_the_run_in_one_line(
    tmp_path: Path, answer_task: Path
) -> None:
    """A window smaller than the first request: nothing to summarize or cut, and
    llama-server does not count the answer, so sending it again would be refused again."""
    script = {"supervisor": supervisor_answering()}
    events, requests = await _run(tmp_path, answer_task, script, {"llama_server_ctx": 1000})
    assert [r.outcome for r in requests] == ["status 400"]  # sent once, never again
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert finished.reason == "provider_error"
    size = requests[0].size // 4
    assert "window (1,000 tokens) cannot hold supervisor's request" in finished.message
    assert f"{size:,} tokens as the server counts it" in finished.message
    assert "--ctx-size" in finished.message
    (learned,) = [e for e in events if isinstance(e, ev.ContextWindowLearned)]
    line = learned_window_line(learned)
    assert "below the smallest window mlra's agents work in" in line
    assert "--tools none" in line and "pass --context-window" not in line


@pytest.mark.parametrize(
    ("text", "window", "requested", "answer_counts"),
    [
        (
            "openai: HTTP 400 exceed_context_size_error: request (3090 tokens) exceeds the "
            "available context size (3072 tokens), try increasing it",
            3072,
            3090,
            False,
        ),
        (
            "This model's maximum context length is 2048 tokens. However, you requested 2130 "
            "tokens (1874 in the messages, 256 in the completion).",
            2048,
            2130,
            True,
        ),
        (
            "This model's maximum context length is 2048 tokens. However, you requested 2100 "
            "output tokens and your prompt contains at least 1 input tokens, for a total of "
            "at least 2101 tokens.",
            2048,
            2101,
            True,
        ),
        (
            "This model's maximum context length is 4096 tokens. However, your request has "
            "5000 input tokens.",
            4096,
            5000,
            False,
        ),
        ("prompt is too long: 210000 tokens > 200000 maximum", 200_000, 210_000, False),
        ("the request is too long", None, None, True),
    ],
    ids=["llama-server", "vllm", "vllm-total", "vllm-input", "anthropic", "unstated"],
)
def test_each_server_s_refusal_is_read_for_its_numbers(
    text: str, window: int | None, requested: int | None, answer_counts: bool
) -> None:
    found = stated_overflow(text)
    assert (found.window, found.requested, found.answer_counts) == (
        window,
        requested,
        answer_counts,
    )


async def test_a_server_that_under_reports_its_prompt_count_is_not_believed(
    tmp_path: Path, answer_task: Path
) -> None:
    """A proxy that reports a constant 50 prompt tokens (or only the uncached part): the
    history is still summarized before the request outgrows the window, and the run says
    once that the counts were doubted."""
    lie = {"input_tokens": 50, "output_tokens": 5}
    worker = [
        {**turn(f"step {n}", call("python", code=f"print('ab ' * {1000 + n})")), "usage": lie}
        for n in range(1, 8)
    ]
    worker += [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]
    script = {
        "supervisor": supervisor_answering(),
        "worker": worker,
        "summarizer:fallback": "SUMMARY: printed text",
    }
    # The window is the server's (vLLM's max_model_len) and mlra knows it: with the
    # counts believed, nothing would be summarized and the server would refuse.
    events, requests = await _run(
        tmp_path, answer_task, script, {"context_limit": 9000}, window=9000
    )
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert finished.reason == "submitted", finished.message
    assert [r for r in requests if r.outcome == "status 400"] == []
    assert any(isinstance(e, ev.HistorySummarized) and e.agent == "worker" for e in events)
    doubted = [e.message for e in events if isinstance(e, ev.Notice) and "apart" in e.message]
    assert len(doubted) == 1 and "counted worker's prompt as 50 tokens" in doubted[0]


async def test_a_worker_s_short_turns_are_summarized_enough_beside_long_instructions(
    tmp_path: Path, answer_task: Path
) -> None:
    """Qwen2.5-Coder-0.5B against a real llama-server at --ctx-size 4608: the worker's
    short failing calls outgrew the window by 72 tokens; the summary was chosen counting
    the subtask's instructions (which it keeps) as saved, so it took too few turns, saved
    too little, and the run ended 'nothing is left to summarize' with turns left."""
    instructions = "Read question.txt and write the answer into answer.txt. " + (
        "Mind the format: a number alone, no words around it. " * 60
    )
    worker = [turn("", call("read_file", path="question.txt", step=n)) for n in range(1, 9)]
    worker += [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]
    script = {
        "supervisor": supervisor_answering(instructions),
        "worker": worker,
        # A small model's summary, as long as the summarizer may write.
        "summarizer:fallback": "SUMMARY: the worker tried to read question.txt. " * 10,
    }
    _, sized = await _run(tmp_path / "sizing", answer_task, script, {})
    workers = [r.size // 4 for r in sized if r.role == "worker"]
    window = workers[8] - 60  # the ninth request is over by 60 tokens
    assert workers[7] < window
    events, requests = await _run(tmp_path, answer_task, script, {"llama_server_ctx": window})
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert finished.reason == "submitted", finished.message
    assert _assert_never_repeated(requests, window, answer_counts=False) == 1
    assert any(isinstance(e, ev.HistorySummarized) and e.agent == "worker" for e in events)
