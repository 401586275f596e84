"""Google ADK: in replay, every tool an ``LlmAgent`` calls (``BaseTool.run_async``), but an agent used as a tool.

ADK runs a tool call through ``tool.run_async(args=..., tool_context=...)``; the guard is on each tool
class that defines ``run_async`` (``FunctionTool`` for a plain function, your own ``BaseTool``): inside
a replay it answers from the case's executor by the name and arguments the model used. An agent used
as a tool (``AgentTool``) is not a tool body: it runs, and its own tools are served.

In a recorded-model replay, ``generate_content_async`` of every ``BaseLlm`` class answers from the
recording: the live ``LlmRequest`` read as OpenInference records it (the system instruction, the
contents with a model turn's function calls and a user turn's function responses as tool messages,
the function declarations, the config's settings), the answer as one ``LlmResponse``.

In capture, what it records its own way (``FRAMEWORK``): ADK under ``openinference-instrumentation-google-adk``.
A turn's parallel calls are summed up in a span of their own, ``execute_tool (merged)``, beside the
calls' spans: no call. A tool span's output is ADK's function response, ``{"id", "name",
"response"}``: the result is the response. An agent span's output is ADK's final ``Event``: its
answer is the text of the event's content.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from ... import seam
from ...model import MessageData, ModelAnswerData, ModelRequestData
from ...spans import SpanData
from .._values import MISSING, loads
from ._framework import Framework
from ._patch import guard, subclasses
from ._served import call_id, joined, message, request, result_text, spec
from ._tracing import turn_on

__all__ = ["FRAMEWORK", "NAME", "ROOTS", "accepts", "install", "instrument", "prepare", "request_of"]

_MERGED = "execute_tool (merged)"
_EVENT = "gcp.vertex.agent.event_id"  # every ADK tool span carries the event it answers


def _not_a_call(span: SpanData) -> bool:
    return span.name == _MERGED and _EVENT in span.attributes


def _tool_span(span: SpanData, name: str, args: Any, result: Any) -> tuple[str, Any, Any] | None:
    """A function response ``{"id", "name", "response"}``: the response."""
    if _EVENT not in span.attributes:
        return None
    value = loads(result) if isinstance(result, str) else result
    if isinstance(value, dict) and set(value) == {"id", "name", "response"} and value["name"] == name:
        return name, args, value["response"]
    return None


def _parts_text(content: Any) -> str | None:
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list):
        return None
    return joined(p.get("text") for p in parts if isinstance(p, dict) and not p.get("thought"))


def _agent_answer(payload: dict[str, Any]) -> Any:
    """An ``Event`` (``author``, ``invocation_id``, ``content``): its content's text (None: none)."""
    if not {"author", "invocation_id"} <= set(payload):
        return MISSING
    return _parts_text(payload.get("content"))


FRAMEWORK = Framework("google-adk", tool_span=_tool_span, agent_answer=_agent_answer, not_a_call=_not_a_call)

ROOTS = ("google.adk",)
NAME = FRAMEWORK.name  # one name in capture and in replay


def _make_run_async(original: Callable[..., Any]) -> Callable[..., Any]:
    async def run_async(self: Any, *, args: dict[str, Any], tool_context: Any) -> Any:
        ex = seam.route()
        if ex is None or _is_agent(self):
            return await original(self, args=args, tool_context=tool_context)
        if seam.sandboxed(ex, self.name, args):
            with seam.running_tool(self.name):  # ADK names its span's tool only as the call ends
                return await original(self, args=args, tool_context=tool_context)
        return await ex.aexecute(self.name, args)

    return run_async


def _is_agent(tool: Any) -> bool:
    from google.adk.tools.agent_tool import AgentTool

    return isinstance(tool, AgentTool)


def _dump(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json", exclude_none=True) if callable(dump) else value


def _messages(contents: list[Any]) -> list[MessageData]:
    """ADK's contents as the neutral messages: a function response is a tool message of its own."""
    out: list[MessageData] = []
    for content in contents:
        c = _dump(content)
        parts = [p for p in c.get("parts") or () if isinstance(p, dict)]
        responses = [p["function_response"] for p in parts if "function_response" in p]
        for r in responses:
            out.append(message("tool", result_text(r.get("response"))))
        calls = [
            (p["function_call"]["name"], p["function_call"].get("args") or {}) for p in parts if "function_call" in p
        ]
        said = _parts_text(c)
        if said or calls or not responses:
            out.append(message("assistant" if c.get("role") == "model" else "user", said, calls))
    return out


def request_of(llm_request: Any) -> ModelRequestData:
    """An ``LlmRequest`` as the request the recording is compared with."""
    config = _dump(llm_request.config) or {}
    system = config.get("system_instruction")
    tools = [
        spec(d["name"], d.get("description"), d.get("parameters_json_schema") or d.get("parameters"))
        for t in config.get("tools") or ()
        for d in t.get("function_declarations") or ()
    ]
    return request(
        [system if isinstance(system, str) else _parts_text(system)], _messages(llm_request.contents), tools, config
    )


def _response(answer: ModelAnswerData) -> Any:
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    parts = [types.Part(text=answer["text"])] if answer["text"] else []
    parts += [
        types.Part(function_call=types.FunctionCall(name=c["name"], args=c["args"] or {}, id=call_id(c, n)))
        for n, c in enumerate(answer["tool_calls"], 1)
    ]
    usage = answer["usage"]
    return LlmResponse(
        content=types.Content(role="model", parts=parts),
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=usage["input_tokens"], candidates_token_count=usage["output_tokens"]
        ),
    )


def _make_generate(original: Callable[..., Any]) -> Callable[..., Any]:
    async def generate_content_async(self: Any, llm_request: Any, stream: bool = False) -> AsyncIterator[Any]:
        server = seam.model_server()
        answer = None if server is None else server.answer(request_of(llm_request))
        if answer is None:
            async for response in original(self, llm_request, stream):
                yield response
        else:
            yield _response(answer)

    return generate_content_async


def install() -> None:
    from google.adk.models.base_llm import BaseLlm
    from google.adk.tools.base_tool import BaseTool

    for cls in subclasses(BaseTool):
        guard(cls, "run_async", _make_run_async)
    for cls in subclasses(BaseLlm):  # a recorded-model replay answers every model's calls
        guard(cls, "generate_content_async", _make_generate)


def accepts(agent: Any) -> bool:
    from google.adk.agents import BaseAgent

    return isinstance(agent, BaseAgent)


def prepare(agent: Any, case: Any) -> Callable[[str], Any]:
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    async def run(prompt: str) -> str | None:
        runner = InMemoryRunner(agent=agent, app_name="harvester")
        session = await runner.session_service.create_session(app_name="harvester", user_id="replay")
        said: str | None = None
        message = types.Content(role="user", parts=[types.Part(text=prompt)])
        async for event in runner.run_async(user_id="replay", session_id=session.id, new_message=message):
            if event.is_final_response() and event.content is not None:
                said = _parts_text(_dump(event.content)) or said
        return said

    return run


def instrument() -> Callable[[], None] | None:
    """OpenInference's instrumentor, when it is off."""
    return turn_on("openinference.instrumentation.google_adk", "GoogleADKInstrumentor")
