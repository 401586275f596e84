"""LangChain chat models in a recorded-model replay (``seam.model_server()``): every call served.

Every chat model's ``_generate``, ``_agenerate``, ``_stream`` and ``_astream`` is guarded, on the class
that defines it: ``invoke``, ``stream``, their async twins and a graph's model node all reach them
after the callbacks opened the model's span (OpenInference's, OpenLLMetry's), so the run still reads
the call. The live messages and the tools bound to the call (``bind_tools``), in OpenAI form, go to
the server as a ``ModelRequestData`` (``_served``), and the recorded answer comes back as an
``AIMessage`` (streamed: ``AIMessageChunk``s, the text then the tool calls whole). Outside such a
replay the guard calls the model, as before.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from ... import seam
from . import _served
from ._patch import guard, subclasses

__all__ = ["install_models"]

# the chat model whose live call is under way (a default _agenerate runs _generate: one call)
_live: contextvars.ContextVar[Any] = contextvars.ContextVar("harvester_lc_model", default=None)


def install_models(base: type) -> None:
    """Guard every chat model class (``BaseChatModel`` and below) where it defines each call."""
    for cls in subclasses(base):
        for name, make in _MODEL_GUARDS:
            guard(cls, name, make)


def _served_answer(model: Any, messages: Any, stop: Any, kwargs: dict[str, Any]) -> Any:
    """The recorded answer to this call, or None (no recorded-model replay, or the live model answers)."""
    server = seam.model_server()
    if server is None or _live.get() is model:
        return None
    return server.answer(_request_data(model, messages, stop, kwargs))


def _request_data(model: Any, messages: Any, stop: Any, kwargs: dict[str, Any]) -> Any:
    """The live request in OpenAI form: system messages to ``system``, the tools bound to the call."""
    from langchain_core.messages import convert_to_openai_messages

    system: list[str | None] = []
    out: list[Any] = []
    for m in convert_to_openai_messages(messages):
        content = _served.text_of(m.get("content"))
        if m.get("role") in ("system", "developer"):
            system.append(content)
            continue
        calls = [(c["function"]["name"], c["function"].get("arguments")) for c in m.get("tool_calls") or ()]
        out.append(_served.message(str(m.get("role")), content, calls))
    try:
        params = model._get_invocation_params(stop=stop, **kwargs)
    except Exception:  # a model whose parameters cannot be listed: the call's own
        params = {**kwargs, "stop": stop}
    return _served.request(system, out, [_tool_spec(t) for t in kwargs.get("tools") or ()], params)


def _tool_spec(tool: Any) -> Any:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    if isinstance(tool, str):  # a name only: nothing more to say
        return _served.spec(tool, None, None)
    fn = convert_to_openai_tool(tool).get("function", {})
    return _served.spec(str(fn.get("name", "")), fn.get("description"), fn.get("parameters"))


def _message(model: Any, answer: Any, chunk: bool = False) -> Any:
    """A recorded answer as the model's ``AIMessage`` (streamed: the last ``AIMessageChunk``, tool calls whole)."""
    from langchain_core.messages import AIMessage, AIMessageChunk

    calls = [
        (c["name"], _served.args_object(c["args"]), _served.call_id(c, n)) for n, c in enumerate(answer["tool_calls"])
    ]
    inp, out = answer["usage"]["input_tokens"] or 0, answer["usage"]["output_tokens"] or 0
    fields: dict[str, Any] = {
        "usage_metadata": {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out},
        "response_metadata": {
            "model_name": answer["model"] or getattr(model, "model_name", None),
            "finish_reason": answer["finish_reason"],
        },
    }
    if chunk:
        tool_chunks = [
            {"name": name, "args": json.dumps(args), "id": cid, "index": n, "type": "tool_call_chunk"}
            for n, (name, args, cid) in enumerate(calls)
        ]
        return AIMessageChunk(content="", tool_call_chunks=tool_chunks, chunk_position="last", **fields)
    tool_calls = [{"name": name, "args": args, "id": cid, "type": "tool_call"} for name, args, cid in calls]
    return AIMessage(content=answer["text"] or "", tool_calls=tool_calls, **fields)


def _result(model: Any, answer: Any) -> Any:
    from langchain_core.outputs import ChatGeneration, ChatResult

    return ChatResult(generations=[ChatGeneration(message=_message(model, answer))])


def _chunks(model: Any, answer: Any) -> list[Any]:
    """A recorded answer as a stream: its text in one chunk, then the tool calls, usage and the end."""
    from langchain_core.messages import AIMessageChunk
    from langchain_core.outputs import ChatGenerationChunk

    first = [AIMessageChunk(content=answer["text"])] if answer["text"] else []
    return [ChatGenerationChunk(message=m) for m in (*first, _message(model, answer, chunk=True))]


@contextlib.contextmanager
def _calling_live(model: Any) -> Iterator[None]:
    token = _live.set(model)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # a generator resumed in another context
            _live.reset(token)


def _make_generate(original: Callable[..., Any]) -> Callable[..., Any]:
    def _generate(self: Any, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        answer = _served_answer(self, messages, stop, kwargs)
        if answer is not None:
            return _result(self, answer)
        with _calling_live(self):
            return original(self, messages, stop, run_manager, **kwargs)

    return _generate


def _make_agenerate(original: Callable[..., Any]) -> Callable[..., Any]:
    async def _agenerate(self: Any, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        answer = _served_answer(self, messages, stop, kwargs)
        if answer is not None:
            return _result(self, answer)
        with _calling_live(self):
            return await original(self, messages, stop, run_manager, **kwargs)

    return _agenerate


def _make_stream(original: Callable[..., Any]) -> Callable[..., Any]:
    def _stream(self: Any, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Iterator[Any]:
        answer = _served_answer(self, messages, stop, kwargs)
        if answer is not None:
            yield from _chunks(self, answer)
            return
        with _calling_live(self):
            yield from original(self, messages, stop, run_manager, **kwargs)

    return _stream


def _make_astream(original: Callable[..., Any]) -> Callable[..., Any]:
    async def _astream(
        self: Any, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        answer = _served_answer(self, messages, stop, kwargs)
        if answer is not None:
            for chunk in _chunks(self, answer):
                yield chunk
            return
        with _calling_live(self):
            async for chunk in original(self, messages, stop, run_manager, **kwargs):
                yield chunk

    return _astream


_MODEL_GUARDS = (
    ("_generate", _make_generate),
    ("_agenerate", _make_agenerate),
    ("_stream", _make_stream),
    ("_astream", _make_astream),
)
