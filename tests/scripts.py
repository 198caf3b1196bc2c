"""Scripted agent conversations for the scripted model server, shared by the tests."""

from __future__ import annotations

from typing import Any


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def turn(text: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


def plan(*titles: str, done: int = 0) -> dict[str, Any]:
    steps = [
        {"id": str(i + 1), "title": t, "status": "done" if i < done else "pending"}
        for i, t in enumerate(titles)
    ]
    return call("update_plan", steps=steps)


def supervisor_answering(
    instructions: str = "Read question.txt and write the answer into answer.txt.",
) -> list[dict[str, Any]]:
    """Plan, assign one subtask, mark it done, submit answer.txt."""
    return [
        turn("I will plan first.", plan("Answer the question", "Submit")),
        turn("", call("assign_subtask", step_id="1", instructions=instructions)),
        turn("The worker is done.", plan("Answer the question", "Submit", done=1)),
        turn("", call("submit", path="answer.txt", note="the answer")),
    ]


def worker_answering() -> list[dict[str, Any]]:
    """Read the question, make every kind of bad call, answer, report."""
    return [
        turn("Let me read the question.", call("read_file", path="question.txt")),
        {
            "text": "A call with broken JSON.",
            "tool_calls": [{"name": "bash", "raw_arguments": '{"command": "echo'}],
        },
        turn("A tool that does not exist.", call("teleport", to="mars")),
        # Arguments that would mean something to another tool: dispatch goes by name only.
        turn("Arguments for the wrong tool.", call("list_files", command="touch pwned.txt")),
        turn("Write the answer.", call("bash", command="echo 42 > answer.txt && env")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]


def answering_script() -> dict[str, Any]:
    return {"supervisor": supervisor_answering(), "worker": worker_answering()}
