"""smolagents: in replay, every ``Tool``, called by a ``ToolCallingAgent`` or from a ``CodeAgent``'s code.

Both agents call a tool object (``tool(**arguments)``), and ``Tool.__call__`` calls the class's
``forward`` after sorting out the inputs; the tracing instrumentor wraps ``__call__``, so its span
stays. The guard is on ``forward`` of every ``Tool`` class (``@tool`` makes one class per function,
with ``forward`` a staticmethod): inside a replay it answers from the case's executor with the
arguments bound to ``forward``'s parameters, the names the model used. ``FinalAnswerTool`` is how a
smolagents agent answers, not a tool call: it runs. A managed agent is an agent, not a tool: it runs,
and its own tools are served.

In a recorded-model replay, ``generate`` and ``generate_stream`` of every ``Model`` class answer from
the recording: the live request read as OpenInference records it (each message's role as smolagents
names it, "tool-call" and "tool-response" included, system messages into ``system``; the tools'
JSON schemas; the model's and the call's keyword settings, the stop sequences and the response
format), the answer as a ``ChatMessage`` (its tool calls with the recorded ids and JSON arguments, as
a provider's come) or, streamed, as ``ChatMessageStreamDelta``s. A ``CodeAgent``'s answer is text
holding its code. The instrumentor wraps these methods outside the guard, so a served call is traced.

In capture, what it records its own way (``FRAMEWORK``): smolagents under OpenInference: its answer
tool, its managed agents, its agent spans' names, its step limit.

A tool span's input is ``{"args", "kwargs"}``, an agent span's ``{"task"}``. It answers through its
``FinalAnswerTool`` (the run's answer, not a call); a managed agent is called by the model by its name
and runs as an agent span; agent spans are named ``<agent>.run``; out of steps, it has the model answer
from the agent itself (``provide_final_answer``).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterator
from enum import Enum
from typing import TYPE_CHECKING, Any

from ... import seam
from ...model import MessageData, ModelAnswerData, ModelRequestData, ToolSpecData
from ...spans import SpanData
from .._history import message_role
from .._requests import settings_of
from .._values import MISSING, text
from ._framework import Framework
from ._patch import guard, subclasses
from ._served import call_id, text_of
from ._tracing import turn_on

if TYPE_CHECKING:
    from .._readings import LlmReading, ToolReading

__all__ = ["FRAMEWORK", "NAME", "ROOTS", "accepts", "install", "instrument", "prepare"]


def _agent_calls(agent: str) -> tuple[str, ...]:
    return (agent,)  # a managed agent: the model calls it by its name


def _read_tool(span: SpanData, reading: ToolReading, result: Any) -> None:
    reading.answer_tool = span.name == "FinalAnswerTool" and reading.name == "final_answer"


def _agent_span_name(span: SpanData, name: str) -> str:
    if name.endswith(".run") and "smolagents.tools_names" in span.attributes:  # "<agent name>.run"
        return name[: -len(".run")]
    return name


def _forced_answer(agents: list[tuple[SpanData, str]], llms: list[LlmReading], tools: list[ToolReading]) -> bool:
    """Out of steps: no final_answer call, and the answer came from a model call made by the agent
    itself (``provide_final_answer``), not from one of its numbered steps."""
    if not agents or not llms or any(t.answer_tool for t in tools):
        return False
    limited = {sp.span_id for sp, _ in agents if "smolagents.max_steps" in sp.attributes}
    return bool(limited) and llms[-1].span.parent_id in limited


def _tool_input(payload: dict[str, Any], call_id: str | None) -> tuple[Any, str | None] | None:
    """``{"args": [], "kwargs": {...}}``: the kwargs."""
    if (
        set(payload) <= {"args", "kwargs", "sanitize_inputs_outputs"}
        and isinstance(payload.get("kwargs"), dict)
        and not payload.get("args")
    ):
        return payload["kwargs"], call_id
    return None


def _agent_prompt(payload: dict[str, Any]) -> Any:
    """``{"task": ...}``: the task."""
    return text(payload["task"]) if isinstance(payload.get("task"), str) else MISSING


FRAMEWORK = Framework(
    "smolagents",
    limit_stops={"AgentMaxStepsError": "max_steps"},
    agent_calls=_agent_calls,
    read_tool=_read_tool,
    agent_span_name=_agent_span_name,
    forced_answer=_forced_answer,
    tool_input=_tool_input,
    agent_prompt=_agent_prompt,
)

ROOTS = ("smolagents",)
NAME = FRAMEWORK.name  # one name in capture and in replay


def _args(tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The call's arguments by ``forward``'s parameter names (what the model named them)."""
    try:
        sig = inspect.signature(tool.forward)
        bound = sig.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return dict(kwargs) if kwargs or not args else {"args": list(args)}
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = list(value) if kind is inspect.Parameter.VAR_POSITIONAL else value
    return out


def _make_forward(original: Callable[..., Any]) -> Callable[..., Any]:
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        ex = seam.route()
        if ex is None or _is_answer(self):
            return original(self, *args, **kwargs)
        called = _args(self, args, kwargs)
        if seam.sandboxed(ex, self.name, called):
            with seam.running_tool(self.name):
                return original(self, *args, **kwargs)
        return ex.execute(self.name, called)

    return forward


def _is_answer(tool: Any) -> bool:
    from smolagents.default_tools import FinalAnswerTool

    return isinstance(tool, FinalAnswerTool)


def _guard_class(cls: type) -> None:
    if "forward" in cls.__dict__:
        guard(cls, "forward", _make_forward)


def _make_call(original: Callable[..., Any]) -> Callable[..., Any]:
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        if seam.route() is not None:
            for cls in type(self).__mro__:  # a tool class made after the replay began
                _guard_class(cls)
        return original(self, *args, **kwargs)

    return __call__


_PARAMS = ("messages", "stop_sequences", "response_format", "tools_to_call_from")


def request_of(model: Any, call: dict[str, Any]) -> ModelRequestData:
    """``generate``'s call as the request the recording is compared with."""
    from smolagents.models import get_tool_json_schema

    system: list[str] = []
    messages: list[MessageData] = []
    for m in call.get("messages") or ():
        role, content = (m.get("role"), m.get("content")) if isinstance(m, dict) else (m.role, m.content)
        role = role.value if isinstance(role, Enum) else role
        if not role or not isinstance(content, (str, list)):
            continue  # not recorded either
        role = message_role(role) or str(role)  # its tool-call / tool-response roles as its models send them
        if role == "system":
            system += [t for t in [text_of(content)] if t]
        else:
            messages.append(MessageData(role=role, content=text_of(content), tool_calls=[], tool_call_id=None))
    tools = [get_tool_json_schema(t)["function"] for t in call.get("tools_to_call_from") or ()]
    extra = {k: v for k, v in call.items() if k not in _PARAMS}
    given = {**(getattr(model, "kwargs", None) or {}), **extra}
    given.update(stop=call.get("stop_sequences"), response_format=call.get("response_format"))
    return ModelRequestData(
        system="\n\n".join(system) or None,
        messages=messages,
        tools=[
            ToolSpecData(name=t["name"], description=t.get("description"), parameters=t.get("parameters"))
            for t in tools
        ],
        settings=settings_of(given),
    )


def _served(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ModelAnswerData | None:
    server = seam.model_server()
    return None if server is None else server.answer(request_of(model, dict(zip(_PARAMS, args), **kwargs)))


def _calls(answer: ModelAnswerData) -> list[tuple[str, str, str]]:
    """The answer's tool calls: (call id, name, JSON arguments as a provider sends them)."""
    return [
        (call_id(c, n), c["name"], json.dumps(c["args"] if c["args"] is not None else {}))
        for n, c in enumerate(answer["tool_calls"], 1)
    ]


def _usage(answer: ModelAnswerData) -> Any:
    from smolagents.monitoring import TokenUsage

    return TokenUsage(
        input_tokens=answer["usage"]["input_tokens"] or 0, output_tokens=answer["usage"]["output_tokens"] or 0
    )


def _make_generate(original: Callable[..., Any]) -> Callable[..., Any]:
    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        answer = _served(self, args, kwargs)
        if answer is None:
            return original(self, *args, **kwargs)
        from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole

        calls = [
            ChatMessageToolCall(
                function=ChatMessageToolCallFunction(name=name, arguments=arguments), id=cid, type="function"
            )
            for cid, name, arguments in _calls(answer)
        ]
        return ChatMessage(
            role=MessageRole.ASSISTANT, content=answer["text"], tool_calls=calls or None, token_usage=_usage(answer)
        )

    return generate


def _make_generate_stream(original: Callable[..., Any]) -> Callable[..., Any]:
    def generate_stream(self: Any, *args: Any, **kwargs: Any) -> Any:
        answer = _served(self, args, kwargs)
        return original(self, *args, **kwargs) if answer is None else _deltas(answer)

    return generate_stream


def _deltas(answer: ModelAnswerData) -> Iterator[Any]:
    """The answer as a provider's stream: the text, each tool call whole, then the usage."""
    from smolagents.models import ChatMessageStreamDelta, ChatMessageToolCallFunction, ChatMessageToolCallStreamDelta

    if answer["text"]:
        yield ChatMessageStreamDelta(content=answer["text"])
    for i, (cid, name, arguments) in enumerate(_calls(answer)):
        function = ChatMessageToolCallFunction(name=name, arguments=arguments)
        yield ChatMessageStreamDelta(
            tool_calls=[ChatMessageToolCallStreamDelta(index=i, id=cid, type="function", function=function)]
        )
    yield ChatMessageStreamDelta(content="", token_usage=_usage(answer))


def install() -> None:
    from smolagents import Tool
    from smolagents.models import Model

    for cls in subclasses(Tool):
        _guard_class(cls)
    guard(Tool, "__call__", _make_call)
    for cls in subclasses(Model):  # a recorded-model replay answers every model's calls
        guard(cls, "generate", _make_generate)
        guard(cls, "generate_stream", _make_generate_stream)


def accepts(agent: Any) -> bool:
    from smolagents import MultiStepAgent

    return isinstance(agent, MultiStepAgent)


def prepare(agent: Any, case: Any) -> Callable[[str], Any]:
    def run(prompt: str) -> str | None:
        out = agent.run(prompt)
        return out if out is None or isinstance(out, str) else str(out)

    return run


def instrument() -> Callable[[], None] | None:
    """OpenInference's instrumentor, when it is off."""
    return turn_on("openinference.instrumentation.smolagents", "SmolagentsInstrumentor")
