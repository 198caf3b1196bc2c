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

How loosely an object is read depends on where it stands, since prose holds JSON
examples (`each RL step logs {"action": "submit", ...}`) that must never run:
- inside `<tool_call>` tags, or as the whole answer (nothing beside it but blanks and
  fence marks), small models' (135M-1.5B) loose shapes are read: the name under
  `tool`, `tool_name` or `action` as well as `name`, the arguments under `parameters`,
  `args`, `input`, `action_input`..., or written flat beside the name
  (`{"name": "bash", "command": "ls"}`);
- an object among other text is a call only as `{"name": <tool>, "arguments": {...}}`
  (or `"parameters"`), or OpenAI's `{"function": {"name", "arguments"}}`.
With the tools described in the prompt (`tools_in_prompt`: `--tool-calls text`, or
`auto` after its fall-back), an answer holding no call that is essentially one
object naming a tool that does not exist (`{"name": "pretrain", "arguments": {...}}`,
told in the words a native call to it is answered with, tools/registry.py) or one
fenced block in a tool's language (```bash) is said too: there the model was told
the format and meant a call. Never elsewhere: ML prose is full of such objects.

`TextCallReading` decides, for a provider, whether an answer's text is read at all:
`--tool-calls text`, and `auto` only for a server named by a base URL (or once the
tools went into the prompt); the vendors' own APIs call tools natively, and their
prose is never run. `tools_prompt` describes the tools in the system prompt for
`--tool-calls text`, where the server is sent no native tool definitions at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mlra.agent.providers.base import ModelResponse, ModelSettings, TextForm, ToolCallRequest
from mlra.agent.providers.call_ids import new_call_id
from mlra.tools.registry import ToolSpec, no_such_tool, parse_arguments

_TAG = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
_FENCE = re.compile(r"```[ \t]*+([\w-]*+)[ \t]*+\n(.*?)```", re.S)
"""Possessive before the newline: a fence followed by a long run of blanks and no
newline took 17 s for 200,000 blanks (the blanks were split every way between
the two runs)."""
_FENCE_MARK = re.compile(r"```[ \t]*[\w-]*")
_BLANK = re.compile(r"(?:\s++|```[ \t]*+[\w-]*+)*+")
"""Blanks and fence marks only (possessive: linear however long)."""
_BARE = re.compile(r'\{\s*"(?:name|function|tool|tool_name|action)"\s*:')
_NAME = re.compile(r'"(?:name|function|tool|tool_name|action)"\s*:\s*"([^"]+)"')
_STRICT_NAME = re.compile(r'"(?:name|function)"\s*:\s*"([^"]+)"')
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
_STRICT_ARGUMENT_KEYS = ("arguments", "parameters")
_NOT_ARGUMENTS = {*_NAME_KEYS, "function", "type", "id"}
"""Keys beside a name that are not arguments written flat beside it."""
SHORT_LINE = 80
"""An answer is "essentially" one object or block when what is beside it is at most one
line this long ("I will train.", "Run this:")."""


FALLBACK_MARK = "(--tool-calls auto: set --tool-calls native or text to choose)"
"""Ends the notice of `auto` falling back to tools in the prompt (agent/loop/tool_call_fallback.py):
a replay finds in its recording whether the run fell back (agent/loop/replay_provider.py)."""

REFUSED_NATIVE = "the server refused native tool definitions"
"""Begins what the notice of a server refusing native tools says (agent/providers/openai.py):
a replay finds in its recording that the run's tools went in the prompt from the start."""


@dataclass
class TextCalls:
    prose: str
    """The text with the spans that held calls taken out."""
    calls: list[ToolCallRequest] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Text that looked like a call to one of the tools but could not be read as one."""
    unknown: list[str] = field(default_factory=list)
    """Names of tools that do not exist, in an answer that is essentially one call-shaped
    object (told only with the tools in the prompt)."""
    code_in: list[str] = field(default_factory=list)
    """Languages of fenced blocks named as a tool is (```bash), which nothing runs, in an
    answer that is essentially that block (told only with the tools in the prompt)."""


@dataclass
class _Found:
    start: int
    end: int
    form: TextForm
    body: str


def read_text_calls(
    text: str, tool_names: Iterable[str], *, tools_in_prompt: bool = False
) -> TextCalls:
    """The calls written in `text` to tools named in `tool_names`, and the prose left;
    `tools_in_prompt`: the model was told the format, so an answer that is essentially
    a call to a tool that does not exist, or a block in a tool's language, is a problem."""
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
        beside = _beside(text, found.start, found.end)
        loose = found.form == "tool_call" or beside == ""
        told = tools_in_prompt and _essentially(beside)
        calls, problem = _read(found, names, loose=loose, told=told, unknown=result.unknown)
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
        if tools_in_prompt:
            result.code_in = [
                lang
                for m in _FENCE.finditer(text)
                if (lang := m.group(1).lower()) in names
                and _essentially(_beside(text, m.start(), m.end()))
            ]
        result.problems += [no_such_tool(name) for name in dict.fromkeys(result.unknown)]
        result.problems += [
            f"a ```{lang} block is text, not a call: nothing ran it"
            for lang in dict.fromkeys(result.code_in)
        ]
    else:
        result.unknown = []
    return result


def _beside(text: str, start: int, end: int) -> str | None:
    """What an answer holds besides one span, blanks and fence marks aside; None when
    that is more than one short line (read without copying the answer, which may be long
    and hold many spans)."""
    if _BLANK.fullmatch(text, 0, start) and _BLANK.fullmatch(text, end):
        return ""
    if len(text) - (end - start) > 4 * SHORT_LINE:
        return None  # the blanks and fences beside one short line take less
    return _FENCE_MARK.sub("", text[:start] + text[end:]).strip()


def _essentially(beside: str | None) -> bool:
    """An answer is essentially one object or block: beside it, at most one short line."""
    return beside is not None and "\n" not in beside and len(beside) <= SHORT_LINE


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
    found: _Found, names: set[str], *, loose: bool, told: bool, unknown: list[str]
) -> tuple[list[ToolCallRequest], str | None]:
    """The calls in one candidate span, and what stopped it being read, if it looked
    like a call and could not be. `loose`: the span is a `<tool_call>` or the whole
    answer, so small models' loose shapes count; `told`: the model was told the format
    and the answer is essentially this span, so call-shaped objects naming no tool go
    to `unknown` (and a broken fenced one that is the whole answer is a problem)."""
    body = found.body.strip()
    named = (_NAME if loose else _STRICT_NAME).search(body)
    try:
        value: Any = json.loads(body)
    except json.JSONDecodeError as exc:
        if (
            found.form == "tool_call"
            or (named and named.group(1) in names)
            or (
                told
                and loose
                and named
                and found.form == "json_fence"
                and _ARGUMENTS_KEY.search(body)
            )
        ):
            what = f"a call to {named.group(1)}" if named else "a tool call"
            return [], f"{what} written as text is not valid JSON ({exc.msg} at char {exc.pos})"
        return [], None
    except (RecursionError, ValueError) as exc:  # nested thousands deep; a 5000-digit number
        if found.form == "tool_call" or (named and named.group(1) in names):
            why = (
                "is nested too deeply"
                if isinstance(exc, RecursionError)
                else "has a number too long"
            )
            return [], f"a tool call written as text {why} to read"
        return [], None
    items = value if isinstance(value, list) else [value]
    calls: list[ToolCallRequest] = []
    strangers: list[str] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        name, arguments = _shape(item) if loose else _strict_shape(item)
        if name is None:
            continue
        if name not in names:
            if found.form == "tool_call" or (told and _call_shaped(item)):
                strangers.append(name)  # {"name": ..., "arguments": {...}}
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


def _call_shaped(item: dict[str, Any]) -> bool:
    """A name with its arguments as an object: what a call to a missing tool looks like
    (`{"name": "resnet50", "parameters": "25.6M"}` is a description, not a call)."""
    function = item.get("function")
    if isinstance(function, dict):
        item = function
    return any(isinstance(item.get(k), dict) for k in _ARGUMENT_KEYS)


def _strict_shape(item: dict[str, Any]) -> tuple[str | None, Any]:
    """(name, arguments) of an object among prose: only {"name", "arguments"|"parameters"}
    with an object as the arguments, or OpenAI's {"function": {"name", "arguments"}}."""
    function = item.get("function")
    if isinstance(function, dict):
        item = function
    name = item.get("name")
    arguments = next((item[k] for k in _STRICT_ARGUMENT_KEYS if k in item), None)
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return None, None
    return name, arguments


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
    else:  # a list, a number: worded as a native call's are (tools/registry.py)
        raw = json.dumps(arguments, ensure_ascii=False)
        parsed, problem = parse_arguments(raw)
    return ToolCallRequest(
        id=new_call_id("call_text"),
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


UNREAD = "looked like a tool call that could not be read: "
"""What the next prompt's note says after "[your last answer " (a display finds the note by
it, to say the matter once, under the answer: console/text/written_calls.py), and what the
run's notice of an unread call says after "<agent>'s answer " (its `kind` marks it; logs
from before the field are read by these words)."""


def unread_notice(agent: str, problems: list[str]) -> str:
    """The run's notice, shown to the person, of an answer whose call was not read."""
    return (
        f"{agent}'s answer {UNREAD}"
        + "; ".join(problems)
        + " (nothing was run; its next prompt says so, each time it happens)"
    )


def problem_note(problems: list[str], tool_names: Iterable[str]) -> str:
    """What the next prompt tells a model whose text looked like a call and was not read."""
    if not problems:
        return ""
    listed = ", ".join(sorted(tool_names))
    return (
        f"[your last answer {UNREAD}"
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


class TextCallReading:
    """What the Anthropic and OpenAI providers share about calls written as text: whether
    an answer's text is read for calls at all, and the switch of `auto` to tools in the
    prompt (agent/loop/tool_call_fallback.py). Mixed in before `ModelProvider`."""

    settings: ModelSettings
    base_url: str | None
    _native_tools: bool
    """False once the tools go described in the prompt (text chosen, or `auto` fell back
    or the server refused native tools)."""

    def reads_text_calls(self) -> bool:
        """`text`, and `auto` for a server named by a base URL or once the tools are in
        the prompt: a vendor's own API calls tools natively, and a JSON example in its
        prose must never run as a call."""
        mode = self.settings.tool_calls
        return mode == "text" or (
            mode == "auto" and (self.base_url is not None or not self._native_tools)
        )

    def tools_in_prompt(self) -> bool:
        return not self._native_tools

    def describe_tools_in_prompt(self) -> bool:
        if not self.base_url or not self._native_tools or self.settings.tool_calls != "auto":
            return False  # the vendor's own API never drops the tools it is sent
        self._native_tools = False
        return True

    def read_calls_into(self, response: ModelResponse, tools: list[ToolSpec]) -> None:
        """Calls written in an answer that holds no native one become its calls."""
        if not tools or response.tool_calls or not self.reads_text_calls():
            return
        found = read_text_calls(response.text, [t.name for t in tools])
        if found.calls:
            response.text, response.tool_calls = found.prose, found.calls
