"""OpenAI Agents SDK: a model call answered from the recording, in a recorded-model replay.

The runner asks its ``Model`` (``get_response``, or ``stream_response`` for ``Runner.run_streamed``)
with the instructions, the input items, the settings, the tools, the output schema and the handoffs;
the guard, on every ``Model`` class that defines them, turns those into the request the recording is
compared with, and answers with the SDK's own ``ModelResponse`` (a message item with the text,
``function_call`` items with the recorded call ids, the recorded usage), or, streamed, with the
Responses stream events the SDK's own models yield, ending in ``ResponseCompletedEvent``. Like the
SDK's models it opens a ``response_span``, so the replay's run still reads the model call.

The request is read as OpenInference records it (the readers build the recorded side from those
spans): each input item one message (a ``function_call`` an assistant message with one call),
system and developer messages and the instructions into ``system``, the tools then the handoffs
as tools, reasoning and hosted-tool items left out.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from ... import seam
from ...model import MessageData, ModelAnswerData, ModelRequestData, ToolSpecData
from .._requests import settings_of
from ._served import args_of, call_id, text_of

__all__ = ["make_get_response", "make_stream_response", "request_of"]

_PARAMS = ("system_instructions", "input", "model_settings", "tools", "output_schema", "handoffs", "tracing")


def _item(item: Any) -> dict[str, Any]:
    dump = getattr(item, "model_dump", None)
    return dump(exclude_unset=True) if callable(dump) else dict(item)


def _messages(given: Any, system: list[str]) -> list[MessageData]:
    if isinstance(given, str):
        return [MessageData(role="user", content=given, tool_calls=[], tool_call_id=None)]
    out: list[MessageData] = []
    for raw in given or ():
        item = _item(raw)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message" and item.get("role") in ("system", "developer"):
            if text := text_of(item.get("content")):
                system.append(text)
        elif kind == "message":
            out.append(
                MessageData(role=item["role"], content=text_of(item.get("content")), tool_calls=[], tool_call_id=None)
            )
        elif kind == "function_call":
            call = {"name": item["name"], "call_id": None, "args": args_of(item.get("arguments"))}
            out.append(MessageData(role="assistant", content=None, tool_calls=[call], tool_call_id=None))  # type: ignore[list-item]
        elif kind == "function_call_output":
            output = item.get("output")
            content = (
                output
                if isinstance(output, str)
                else text_of(output)
                if isinstance(output, list)
                else json.dumps(output)
            )
            out.append(MessageData(role="tool", content=content, tool_calls=[], tool_call_id=None))
    return out


def _tools(tools: list[Any], handoffs: list[Any]) -> list[ToolSpecData]:
    from agents import FunctionTool

    specs = [
        ToolSpecData(name=t.name, description=t.description, parameters=t.params_json_schema)
        if isinstance(t, FunctionTool)
        else ToolSpecData(name=getattr(t, "name", None) or type(t).__name__, description=None, parameters=None)
        for t in tools or ()
    ]
    specs += [
        ToolSpecData(name=h.tool_name, description=h.tool_description, parameters=h.input_json_schema)
        for h in handoffs or ()
    ]
    return specs


def _settings(model_settings: Any, output_schema: Any) -> dict[str, Any]:
    given = {**(getattr(model_settings, "extra_args", None) or {})}
    for name in ("temperature", "top_p", "max_tokens", "tool_choice", "parallel_tool_calls"):
        value = getattr(model_settings, name, None)
        if value is not None:
            given[name] = value if isinstance(value, (str, int, float, bool)) else str(value)
    if output_schema is not None and not output_schema.is_plain_text():
        schema = {
            "name": "final_output",
            "schema": output_schema.json_schema(),
            "strict": output_schema.is_strict_json_schema(),
        }
        given["response_format"] = {"type": "json_schema", "json_schema": schema}
    return settings_of(given)


def request_of(call: dict[str, Any]) -> ModelRequestData:
    """The runner's call of the model as the request the recording is compared with."""
    system = [call["system_instructions"]] if call.get("system_instructions") else []
    messages = _messages(call.get("input"), system)
    return ModelRequestData(
        system="\n\n".join(system) or None,
        messages=messages,
        tools=_tools(call.get("tools") or [], call.get("handoffs") or []),
        settings=_settings(call.get("model_settings"), call.get("output_schema")),
    )


def _output(answer: ModelAnswerData) -> list[Any]:
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    out: list[Any] = []
    if answer["text"]:
        text = ResponseOutputText(type="output_text", text=answer["text"], annotations=[])
        out.append(
            ResponseOutputMessage(id="msg_0", type="message", role="assistant", status="completed", content=[text])
        )
    for n, c in enumerate(answer["tool_calls"], 1):
        cid = call_id(c, n)
        arguments = json.dumps(c["args"] if c["args"] is not None else {})
        out.append(
            ResponseFunctionToolCall(
                type="function_call",
                id=f"fc_{cid}",
                call_id=cid,
                name=c["name"],
                arguments=arguments,
                status="completed",
            )
        )
    return out


def _response(answer: ModelAnswerData, call: dict[str, Any], request: ModelRequestData, output: list[Any]) -> Any:
    from openai.types.responses import FunctionTool, Response, ResponseUsage
    from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

    inp, out = answer["usage"]["input_tokens"], answer["usage"]["output_tokens"]
    usage = None
    if inp is not None or out is not None:
        usage = ResponseUsage(
            input_tokens=inp or 0,
            output_tokens=out or 0,
            total_tokens=(inp or 0) + (out or 0),
            input_tokens_details=_zero(InputTokensDetails),
            output_tokens_details=_zero(OutputTokensDetails),
        )
    tools = [
        FunctionTool(type="function", name=t["name"], description=t["description"], parameters=t["parameters"])
        for t in request["tools"] or ()
        if t["parameters"] is not None
    ]
    return Response(
        id="resp_recorded",
        object="response",
        created_at=0,
        model=answer["model"] or "recorded",
        instructions=call.get("system_instructions"),
        output=output,
        parallel_tool_calls=False,
        tool_choice="auto",
        tools=tools,
        status="completed",
        usage=usage,
    )


def _zero(details: Any) -> Any:
    """A usage detail with every count it requires zero (they vary across openai versions)."""
    return details(**{name: 0 for name, f in details.model_fields.items() if f.is_required()})


def _usage(response: Any) -> Any:
    from agents.usage import Usage

    u = response.usage
    if u is None:
        return Usage(requests=1)
    return Usage(requests=1, input_tokens=u.input_tokens, output_tokens=u.output_tokens, total_tokens=u.total_tokens)


def _served(call: dict[str, Any]) -> tuple[Any, Any] | None:
    """The recorded answer to this call as a Responses ``Response`` and the call's tracing, or None."""
    server = seam.model_server()
    if server is None:
        return None
    request = request_of(call)
    answer = server.answer(request)
    if answer is None:
        return None
    return _response(answer, call, request, _output(answer)), call.get("tracing")


def _trace(tracing: Any, response: Any, given: Any) -> None:
    """A ``response_span`` as the SDK's Responses model records one, holding the served response."""
    from agents.tracing import response_span
    from agents.usage import model_usage_to_span_usage

    with response_span(disabled=tracing is None or tracing.is_disabled()) as span:
        span.span_data.usage = model_usage_to_span_usage(_usage(response))
        if tracing is not None and tracing.include_data():
            span.span_data.response = response
            span.span_data.input = given


def make_get_response(original: Callable[..., Any]) -> Callable[..., Any]:
    async def get_response(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = dict(zip(_PARAMS, args), **kwargs)
        served = _served(call)
        if served is None:
            return await original(self, *args, **kwargs)
        from agents.items import ModelResponse

        response, tracing = served
        _trace(tracing, response, call.get("input"))
        return ModelResponse(output=list(response.output), usage=_usage(response), response_id=None)

    return get_response


def make_stream_response(original: Callable[..., Any]) -> Callable[..., Any]:
    def stream_response(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        if seam.model_server() is None:
            return original(self, *args, **kwargs)
        return _stream(original, self, args, kwargs)

    return stream_response


async def _stream(
    original: Callable[..., Any], model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> AsyncIterator[Any]:
    call = dict(zip(_PARAMS, args), **kwargs)
    served = _served(call)
    if served is None:
        async for event in original(model, *args, **kwargs):
            yield event
        return
    response, tracing = served
    _trace(tracing, response, call.get("input"))
    for event in _events(response):
        yield event


def _events(response: Any) -> list[Any]:
    """The served response as the stream the SDK's models yield: created, the text as a delta, each
    output item done, completed (carrying the whole response)."""
    from openai.types.responses import (
        ResponseCompletedEvent,
        ResponseCreatedEvent,
        ResponseOutputItemAddedEvent,
        ResponseOutputItemDoneEvent,
        ResponseTextDeltaEvent,
    )

    seq = iter(range(1_000_000))
    started = response.model_copy(update={"output": [], "status": "in_progress"})
    events: list[Any] = [ResponseCreatedEvent(type="response.created", response=started, sequence_number=next(seq))]
    for i, item in enumerate(response.output):
        events.append(
            ResponseOutputItemAddedEvent(
                type="response.output_item.added", item=item, output_index=i, sequence_number=next(seq)
            )
        )
        if item.type == "message":
            for part in item.content:
                events.append(
                    ResponseTextDeltaEvent(
                        type="response.output_text.delta",
                        content_index=0,
                        delta=part.text,
                        item_id=item.id,
                        output_index=i,
                        logprobs=[],
                        sequence_number=next(seq),
                    )
                )
        events.append(
            ResponseOutputItemDoneEvent(
                type="response.output_item.done", item=item, output_index=i, sequence_number=next(seq)
            )
        )
    events.append(ResponseCompletedEvent(type="response.completed", response=response, sequence_number=next(seq)))
    return events
