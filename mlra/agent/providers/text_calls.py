"""Tool calls that a model wrote as text, read as calls.

Many local models (served by llama.cpp, Ollama, or vLLM without a tool parser)
answer a tool request with text instead of a native call, in one of three
forms:

    <tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>
    ```json
    {"name": "bash", "arguments": {"command": "ls"}}
    ```
    {"name": "bash", "arguments": {"command": "ls"}}

`read_text_calls` finds them. Only the names of tools the agent has count as
calls: a JSON object about something else stays prose. The span a call was read
from leaves the answer's text (the prose around it stays), so the transcript does
not show the call twice. Text that looked like a call but could not be read (broken
JSON in a `<tool_call>`, a fenced block naming a tool) is reported as a problem,
which the agent's next prompt tells the model (agent/loop/model_turn.py); the problems
are found again from the recorded text alone, so a resumed run tells the same.

Small models (135M-1.5B) write calls loosely, so what can be read without guessing is
read: the name under `tool`, `tool_name` or `action`, the arguments under
`parameters`, `args`, `input`, `action_input`..., or beside the name
(`{"name": "bash", "command": "ls"}`). What cannot be is said, but only in an answer
that holds no call (there, it is what the model meant to do): a call-shaped object
naming a tool that does not exist (`{"name": "pretrain", "arguments": {...}}`, told in
the words a native call to it is answered with, tools/registry.py), and a fenced block
in a tool's language (```bash) that nothing runs.

`tools_prompt` describes the tools in the system prompt for `--tool-calls text`,
where the server is sent no native tool definitions at all.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mlra.agent.providers.base import TextForm, ToolCallRequest
from mlra.tools.registry import ToolSpec, no_such_tool, parse_arguments

_TAG = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
_FENCE = re.compile(r"```[ \t]*([\w-]*)[ \t]*\n(.*?)```", re.S)
_BARE = re.compile(r'\{\s*"(?:name|function|tool|tool_name|action)"\s*:')
_NAME = re.compile(r'"(?:name|function|tool|tool_name|action)"\s*:\s*"([^"]+)"')
_ARGUMENTS_KEY = re.compile(r'"(?:arguments|parameters)"\s*:')
_FENCE_LANGS = {"", "json", "tool_call", "tool_code", "tool"}
_NAME_KEYS = ("name", "tool", "tool_name", "action")
_ARGUMENT_KEYS = (
    "arguments",
    "parameters",
    "args",
    "input",
    "params",
    "action_input",
    "tool_input",
    "tool_args",
)
_NOT_ARGUMENTS = {*_NAME_KEYS, "function", "type", "id"}
"""Keys beside a name that are not arguments written flat beside it."""


FALLBACK_MARK = "(--tool-calls auto: set --tool-calls native or text to choose)"
"""Ends the notice of `auto` falling back to tools in the prompt (agent/loop/tool_call_fallback.py):
a replay finds in its recording whether the run fell back (agent/loop/replay_provider.py)."""


@dataclass
class TextCalls:
    prose: str
    """The text with the spans that held calls taken out."""
    calls: list[ToolCallRequest] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Text that looked like a call to one of the tools but could not be read as one."""
    unknown: list[str] = field(default_factory=list)
    """Names of tools that do not exist, in call-shaped objects outside `<tool_call>`."""
    code_in: list[str] = field(default_factory=list)
    """Languages of fenced blocks named as a tool is (```bash), which nothing runs."""


@dataclass
class _Found:
    start: int
    end: int
    form: TextForm
    body: str


def read_text_calls(text: str, tool_names: Iterable[str]) -> TextCalls:
    """The calls written in `text` to tools named in `tool_names`, and the prose left."""
    names = set(tool_names)
    if not names or not any(mark in text for mark in ("{", "<tool_call>", "```")):
        return TextCalls(prose=text)
    spans: list[tuple[int, int]] = []
    taken: list[tuple[int, int]] = []
    """Spans read as calls or reported: what lies inside them is not read again."""
    result = TextCalls(prose=text)
    for found in _candidates(text):
        if any(found.start < end and start < found.end for start, end in taken):
            continue  # inside a span already read (a fenced block inside a tag, ...)
        calls, problem = _read(found, names, result.unknown)
        if problem:
            result.problems.append(problem)
            taken.append((found.start, found.end))
        if calls:
            result.calls.extend(calls)
            spans.append((found.start, found.end))
            taken.append((found.start, found.end))
    if spans:
        result.prose = _cut(text, sorted(spans))
    if not result.calls:
        result.code_in = [
            lang for m in _FENCE.finditer(text) if (lang := m.group(1).lower()) in names
        ]
        result.problems += [no_such_tool(name) for name in dict.fromkeys(result.unknown)]
        result.problems += [
            f"a ```{lang} block is text, not a call: nothing ran it"
            for lang in dict.fromkeys(result.code_in)
        ]
    return result


def _candidates(text: str) -> list[_Found]:
    found: list[_Found] = []
    for match in _TAG.finditer(text):
        found.append(_Found(match.start(), match.end(), "tool_call", match.group(1)))
    for match in _FENCE.finditer(text):
        if match.group(1).lower() in _FENCE_LANGS and match.group(2).lstrip()[:1] in "{[":
            found.append(_Found(match.start(), match.end(), "json_fence", match.group(2)))
    decoder = json.JSONDecoder()
    for match in _BARE.finditer(text):
        start = match.start()
        try:
            _, end = decoder.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            end = len(text)  # broken: up to the end, for the problem report only
        found.append(_Found(start, end, "json", text[start:end]))
    found.sort(key=lambda f: (f.start, -f.end))
    return found


def _read(
    found: _Found, names: set[str], unknown: list[str]
) -> tuple[list[ToolCallRequest], str | None]:
    """The calls in one candidate span, and what stopped it being read, if it looked
    like a call and could not be; call-shaped objects naming no tool go to `unknown`."""
    body = found.body.strip()
    try:
        value: Any = json.loads(body)
    except json.JSONDecodeError as exc:
        named = _NAME.search(body)
        if (
            found.form == "tool_call"
            or (named and named.group(1) in names)
            or (named and found.form == "json_fence" and _ARGUMENTS_KEY.search(body))
        ):
            what = f"a call to {named.group(1)}" if named else "a tool call"
            return [], f"{what} written as text is not valid JSON ({exc.msg} at char {exc.pos})"
        return [], None
    except RecursionError:  # nested thousands deep: no call's shape
        named = _NAME.search(body)
        if found.form == "tool_call" or (named and named.group(1) in names):
            return [], "a tool call written as text is nested too deeply to read"
        return [], None
    items = value if isinstance(value, list) else [value]
    calls: list[ToolCallRequest] = []
    strangers: list[str] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        name, arguments = _shape(item)
        if name is None:
            continue
        if name not in names:
            if found.form == "tool_call" or any(k in item for k in (*_ARGUMENT_KEYS, "function")):
                strangers.append(name)  # call-shaped: {"name": ..., "arguments": ...}
            continue
        calls.append(_request(name, arguments, found.form))
    problem = None
    if strangers and found.form == "tool_call":
        problem = "; ".join(no_such_tool(name) for name in strangers)
    elif strangers:
        unknown.extend(strangers)
    if not calls and not strangers and found.form == "tool_call":
        problem = 'a <tool_call> holds no {"name": ..., "arguments": {...}} object'
    return calls, problem


def _shape(item: dict[str, Any]) -> tuple[str | None, Any]:
    """(name, arguments) of the shapes models write: {"name", "arguments"|"parameters"},
    OpenAI's own {"function": {"name", "arguments"}}, LangChain's {"action",
    "action_input"}, and arguments written flat beside the name."""
    function = item.get("function")
    if isinstance(function, dict):
        item = function
    name = next((item[k] for k in _NAME_KEYS if isinstance(item.get(k), str)), None)
    if name is None and isinstance(function, str):
        name = function
    if not isinstance(name, str):
        return None, None
    key = next((k for k in _ARGUMENT_KEYS if k in item), None)
    if key is not None:
        return name, item[key]
    return name, {k: v for k, v in item.items() if k not in _NOT_ARGUMENTS}


def _request(name: str, arguments: Any, form: TextForm) -> ToolCallRequest:
    if isinstance(arguments, str):
        parsed, problem = parse_arguments(arguments)
        raw = arguments
    elif isinstance(arguments, dict):
        parsed, problem = arguments, None
        raw = json.dumps(arguments, ensure_ascii=False)
    else:
        parsed, problem = None, f"the arguments are {type(arguments).__name__}, not a JSON object"
        raw = json.dumps(arguments, ensure_ascii=False)
    return ToolCallRequest(
        id=f"call_text_{uuid.uuid4().hex[:12]}",
        name=name,
        arguments=parsed,
        raw_arguments=raw,
        parse_error=problem,
        from_text=form,
    )


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    kept: list[str] = []
    at = 0
    for start, end in spans:
        kept.append(text[at:start])
        at = end
    kept.append(text[at:])
    prose = "".join(kept)
    prose = re.sub(r"\n{3,}", "\n\n", prose)
    return prose.strip()


def call_as_text(call: ToolCallRequest) -> str:
    """A call read from text, written again in the form the model used (the history
    shows a text-calling model its own calls, not native ones its template may drop)."""
    arguments: Any = call.arguments if call.arguments is not None else call.raw_arguments
    body = json.dumps({"name": call.name, "arguments": arguments}, ensure_ascii=False)
    if call.from_text == "tool_call":
        return f"<tool_call>\n{body}\n</tool_call>"
    if call.from_text == "json_fence":
        return f"```json\n{body}\n```"
    return body


def result_as_text(name: str, content: str, *, is_error: bool) -> str:
    """A text call's result, given back as a user message."""
    label = "error" if is_error else "result"
    return f"[{name} {label}]\n{content or '(no output)'}"


def problem_note(problems: list[str], tool_names: Iterable[str]) -> str:
    """What the next prompt tells a model whose text looked like a call and was not read."""
    if not problems:
        return ""
    listed = ", ".join(sorted(tool_names))
    return (
        "[your last answer looked like a tool call that could not be read: "
        + "; ".join(problems)
        + ". Nothing was run. To call a tool, write exactly one JSON object "
        '{"name": "<tool>", "arguments": {...}} inside <tool_call></tool_call>; '
        f"the tools are: {listed}]"
    )


def tools_prompt(tools: list[ToolSpec]) -> str:
    """The tools described in the system prompt, for servers sent no native tools."""
    lines = [
        "# Tools",
        "You call a tool by writing, anywhere in your answer:",
        '<tool_call>{"name": "<tool name>", "arguments": {<arguments as JSON>}}</tool_call>',
        "One call per <tool_call> block; several blocks make several calls, run in order. "
        "The results come back in the next message.",
        "",
    ]
    for tool in tools:
        schema = json.dumps(tool.parameters, ensure_ascii=False)
        lines.append(f"## {tool.name}\n{tool.description}\nArguments (JSON schema): {schema}\n")
    return "\n".join(lines).rstrip()
