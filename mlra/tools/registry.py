"""Tools: typed arguments, generated schemas, dispatch by name.

A tool declares a pydantic model of its arguments; the JSON schema the model
provider sees is generated from it, and a call is dispatched strictly by the
tool's name. Whatever goes wrong in a call (unknown tool, arguments that are not
JSON or do not fit the schema, a tool that raises) becomes an error observation
the model can read and act on; the run goes on.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from mlra.tools.sandbox.base import OutputCallback, Sandbox, SandboxError
from mlra.tools.sandbox.time_out import TimeOut

Signal = Literal["submit", "report"]
A = TypeVar("A", bound=BaseModel)


class ToolSpec(BaseModel):
    """What a model provider is told about a tool."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass
class ToolContext:
    sandbox: Sandbox
    agent: str
    call_id: str = ""
    on_output: OutputCallback | None = None
    default_timeout_s: float = 600.0
    remaining_s: Callable[[], float] = lambda: float("inf")
    default_artifact: str | None = None
    """The artifact the task asks for (workspace-relative): what `submit` with no path hands in."""
    root_outside: Callable[[str, str], object] | None = None
    """Told (what, why) where a step mlra takes for the call outside the sandbox (a fetch
    box) ran as root outside: the run says it once (agent/loop/root_outside.py)."""
    time_outs: list[TimeOut] = field(default_factory=list)
    """The time-outs this call's commands and waits run under (`time_out`): the run raises
    them with its deadline while the call runs (agent/loop/tool_step.py)."""

    def timeout(self, requested: float | None) -> float:
        """A command never outlives the run's deadline."""
        wanted = requested if requested and requested > 0 else self.default_timeout_s
        return max(1.0, min(wanted, self.remaining_s()))

    def time_out(self, requested: float | None) -> TimeOut:
        """`timeout`, as a time-out the run's deadline moves while the command runs: one
        the old deadline bound runs on to a raised one (a search's attempt given more time)."""
        wanted = requested if requested and requested > 0 else self.default_timeout_s
        moving = TimeOut(self.timeout(requested), wanted=wanted)
        self.time_outs.append(moving)
        return moving


@dataclass
class ToolOutcome:
    output: str
    ok: bool = True
    exit_code: int | None = None
    timed_out: bool = False
    error: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    signal: Signal | None = None
    """Asks the agent loop to end something: the run (submit) or the subtask (report)."""
    duration_s: float = 0.0


class Tool(Generic[A]):
    name: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[BaseModel]]
    reruns_on_resume: ClassVar[bool] = False
    """A tool whose work is the agent's own code (the supervisor's `assign_subtask`
    runs the worker): a resumed run executes it again, catching up inside it,
    where any other tool's recorded result is taken as it is; so is its own where the
    log closed it before it began (rejected, or the run ended while it waited at its
    breakpoint): one result for the call, the one the model read."""
    reruns_when_interrupted: ClassVar[bool] = False
    """A tool that only waits on what the run itself takes up again (`attempt_wait`
    on the attempts a resumed run resumes): cut short by the run's end, it is run again
    once the run is live, rather than answered "interrupted"; a result the log holds is
    taken as it is."""
    reruns_in_replay: ClassVar[bool] = True
    """In a replay (`--model replay:RUN`), a call the run stopped under (killed, or stopped
    by the user) is run again on resume where the recording holds its result: it runs in
    the sandbox as the recording ran it, and the recording's next request holds that
    result, so an "interrupted" one made the replay diverge there. Not a tool that starts
    what the run keeps track of beyond the call (a job, an attempt): one started before
    the stop is in the log, and a second run would start another beside it."""
    held_at_limit: ClassVar[bool] = False
    """A tool whose call a search's attempt, cut by its time limit, leaves running for its
    run to take up or cut as it ends (`validate`: a grading under way on the artifact as
    it stands goes on as the closing validation, agent/loop/held_calls.py)."""

    async def run(self, args: A, ctx: ToolContext) -> ToolOutcome:
        raise NotImplementedError

    @classmethod
    def spec(cls) -> ToolSpec:
        return ToolSpec(name=cls.name, description=cls.description, parameters=schema_of(cls.Args))


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """A compact JSON schema for an argument model, as providers want it: flat.

    Pydantic puts a nested model (`update_plan`'s steps) in `$defs` and points to it
    with `$ref`, under the model's class name, and titles every part with its class
    or field name. Small models read those internals as part of the arguments (Qwen
    sent `{"PlanStepArgs": [...]}` for `update_plan`), so each reference is replaced
    by what it refers to and the titles go: the schema says only what a call holds.
    """
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    schema = _inlined(schema, defs, ())
    _strip_titles(schema)
    schema.setdefault("properties", {})
    schema["additionalProperties"] = False
    return schema


def _inlined(node: Any, defs: dict[str, Any], within: tuple[str, ...]) -> Any:
    """`node` with every `$ref` to `defs` replaced by a copy of its target (keywords
    beside the `$ref`, such as a field's description, kept). `within`: the definitions
    being inlined around `node`, so a model that contains itself is refused, not
    expanded forever (a tool's arguments are a tree, which a flat schema can hold)."""
    if isinstance(node, list):
        return [_inlined(item, defs, within) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if name in within or name not in defs:
            raise ValueError(f"a tool's argument schema cannot be made flat at {ref}")
        beside = {k: v for k, v in node.items() if k != "$ref"}
        return _inlined({**defs[name], **beside}, defs, (*within, name))
    return {key: _inlined(value, defs, within) for key, value in node.items()}


def _strip_titles(node: Any) -> None:
    if isinstance(node, dict):
        node.pop("title", None)
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                for prop in value.values():
                    _strip_titles(prop)
            else:
                _strip_titles(value)
    elif isinstance(node, list):
        for item in node:
            _strip_titles(item)


def no_such_tool(name: str) -> str:
    """How a call to a tool that does not exist is answered, native or written as text
    (agent/providers/text_calls.py): in the same words, so a model hears one thing."""
    return f"there is no tool named {name!r}"


def error(message: str) -> ToolOutcome:
    return ToolOutcome(output=f"Error: {message}", ok=False, error=message)


def parse_arguments(raw: str | dict[str, Any] | None) -> tuple[dict[str, Any] | None, str | None]:
    """Arguments as the model sent them: a dict, or the reason they are not one."""
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, dict):
        return raw, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, f"the arguments are not valid JSON: {exc.msg} (character {exc.pos})"
    except RecursionError:  # `[` thousands deep: no tool's arguments
        return None, "the arguments are not valid JSON: nested too deeply to read"
    except ValueError:  # an integer of over 4,300 digits, which Python will not read
        return None, "the arguments hold a number too long to read"
    if not isinstance(value, dict):
        return None, f"the arguments must be a JSON object, not {type(value).__name__}"
    return value, None


def describe_validation_error(exc: ValidationError) -> list[str]:
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        problems.append(f"{where}: {err['msg']}")
    return problems


def validated(tool: Tool[Any], arguments: dict[str, Any]) -> tuple[BaseModel | None, str | None]:
    """A call's arguments as the tool reads them, or what is wrong with them (one line,
    naming what the tool takes): the dispatch's check, and an edit's at a breakpoint."""
    fields = tool.Args.model_fields
    unknown = sorted(set(arguments) - set(fields))
    problems = [f"unknown argument {key!r}" for key in unknown]
    args = None
    try:
        args = tool.Args.model_validate({k: v for k, v in arguments.items() if k in fields})
    except ValidationError as exc:
        problems += describe_validation_error(exc)
    if problems or args is None:
        takes = ", ".join(fields) or "no arguments"
        name = tool.name
        return None, f"invalid arguments for {name}: {'; '.join(problems)} ({name} takes: {takes})"
    return args, None


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool[Any]] = ()) -> None:
        self._tools: dict[str, Tool[Any]] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool[Any]) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        self._tools[tool.name] = tool

    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)

    def specs(self) -> list[ToolSpec]:
        return [tool.spec() for tool in self._tools.values()]

    async def dispatch(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        ctx: ToolContext,
        *,
        parse_error: str | None = None,
    ) -> ToolOutcome:
        started = time.monotonic()
        outcome = await self._dispatch(name, arguments, ctx, parse_error)
        outcome.duration_s = round(time.monotonic() - started, 4)
        return outcome

    async def _dispatch(
        self, name: str, arguments: dict[str, Any] | None, ctx: ToolContext, parse_error: str | None
    ) -> ToolOutcome:
        tool = self._tools.get(name)
        if tool is None:
            return error(f"{no_such_tool(name)}; the tools are: {', '.join(self._tools)}")
        if parse_error is not None or arguments is None:
            return error(f"{name}: {parse_error or 'missing arguments'}")
        args, problem = validated(tool, arguments)
        if args is None:
            return error(problem or f"invalid arguments for {name}")
        try:
            return await tool.run(args, ctx)
        except SandboxError as exc:
            return error(f"{name}: {exc}")
        except Exception as exc:  # a tool bug must not end the run
            tb = traceback.extract_tb(exc.__traceback__)
            where = f" (at {tb[-1].filename}:{tb[-1].lineno})" if tb else ""
            return error(f"{name} raised {type(exc).__name__}: {exc}{where}")
