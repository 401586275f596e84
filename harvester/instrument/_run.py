"""``agent_run()`` and its handle: one agent invocation, its model calls, its answer or its stop.

A model call is recorded as a GenAI ``chat`` span with what it answered and, when the loop says so, what
it received (``_genai``). ``AgentRun.model`` is also a replay seam for the model, as ``@tool`` is for
tools: inside a recorded-model replay it asks ``seam.model_server()`` for the recorded answer and never
calls the model; anywhere else it calls it, so production behaves exactly as without harvester.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Unpack

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from .. import seam
from . import _genai

if TYPE_CHECKING:
    from ..model import ModelAnswerData, ModelRequestData

__all__ = ["RUN", "TRACER_NAME", "AgentRun", "ModelAnswer", "agent_run"]

TRACER_NAME = "harvester"
RUN = otel_context.create_key("harvester.agent_run")


@dataclass
class ModelAnswer:
    """What one model call answered, in the form ``AgentRun.model`` takes from your model and returns.

    ``tool_calls``: ``{"id", "name", "arguments"}`` (an ``args`` key is read too; ids left out are
    filled in). Token counts left out are unknown, never 0. ``served``: answered from the recording in a
    recorded-model replay (the model was not called; the usage is the recorded one).
    """

    text: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    served: bool = False


def _answer_of(value: Any) -> ModelAnswer:
    """Your model's return value: a ``ModelAnswer``, a mapping with its fields, or a plain text."""
    if isinstance(value, ModelAnswer):
        return value
    if isinstance(value, Mapping):
        names = ModelAnswer.__dataclass_fields__
        return ModelAnswer(**{k: v for k, v in value.items() if k in names and k != "served"})
    return ModelAnswer(text=None if value is None else str(value))


def _served(data: ModelAnswerData) -> ModelAnswer:
    usage = data.get("usage") or {}
    return ModelAnswer(
        text=data.get("text"),
        tool_calls=[
            {"id": c.get("call_id"), "name": c["name"], "arguments": c.get("args")} for c in data["tool_calls"]
        ],
        input_tokens=usage.get("input_tokens"),
        output_tokens=usage.get("output_tokens"),
        finish_reason=data.get("finish_reason"),
        served=True,
    )


class AgentRun:
    """Handle of an ``agent_run``: record model calls, the answer and, when not answered, the stop."""

    def __init__(self, span: Span, name: str, tracer: trace.Tracer) -> None:
        self.span = span
        self.name = name
        self._tracer = tracer
        self._ids = itertools.count(1)
        self._pending: dict[str, list[str]] = {}  # tool name -> requested call ids not yet executed
        self._lock = threading.Lock()  # tools of one model turn may run in parallel threads
        self.answer: str | None = None

    def model(
        self,
        call: Callable[[], Any],
        *,
        model: str,
        **request: Unpack[_genai.RequestArgs],
    ) -> ModelAnswer:
        """Call your model through harvester: ``call()`` returns a ``ModelAnswer`` (or a dict of its fields).

        The request (``system``, ``messages``, ``tools``, ``settings``: ``_genai.request``) and the answer
        are recorded on a ``chat`` span. In a recorded-model replay the recorded answer comes back and
        ``call`` is never called; a request unlike the recorded one raises ``ModelInputChanged`` here.
        Returns the answer with its tool call ids filled in.
        """
        req = _genai.request(**request)
        req["model"] = model  # the model asked for: a recording another model answered is a drift
        served = self._served(req)
        with self._chat(model, req) as span:
            return self._answered(span, model, served if served is not None else _answer_of(call()))

    async def amodel(
        self,
        call: Callable[[], Awaitable[Any]],
        *,
        model: str,
        **request: Unpack[_genai.RequestArgs],
    ) -> ModelAnswer:
        """``model`` for an async model: ``call()`` returns an awaitable."""
        req = _genai.request(**request)
        req["model"] = model  # the model asked for: a recording another model answered is a drift
        served = self._served(req)
        with self._chat(model, req) as span:
            return self._answered(span, model, served if served is not None else _answer_of(await call()))

    def model_call(
        self,
        model: str,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        tool_calls: Any = (),
        text: str | None = None,
        **request: Unpack[_genai.RequestArgs],
    ) -> list[dict[str, Any]]:
        """Record one model call you made and the tool calls it requested; returns them with call ids filled in.

        Token counts left out are unknown (the run's cost then is too), never recorded as 0. The request
        (``system``, ``messages``, ``tools``, ``settings``) is recorded when given. Recording only: a
        recorded-model replay cannot answer this call (``model`` can)."""
        given = any(v is not None for v in request.values())
        req = _genai.request(**request) if given else None
        answer = ModelAnswer(text, list(tool_calls), input_tokens, output_tokens)
        with self._chat(model, req) as span:
            return self._answered(span, model, answer).tool_calls

    def _served(self, req: ModelRequestData) -> ModelAnswer | None:
        server = seam.model_server()
        if server is None:
            return None
        data = server.answer(req)  # ModelInputChanged propagates into the agent, as a failed call would
        return None if data is None else _served(data)

    @contextlib.contextmanager
    def _chat(self, model: str, req: ModelRequestData | None) -> Iterator[Span]:
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
        if req is not None:
            attrs |= _genai.request_attributes(req)
        with self._tracer.start_as_current_span(f"chat {model}", kind=trace.SpanKind.CLIENT, attributes=attrs) as span:
            yield span

    def _answered(self, span: Span, model: str, answer: ModelAnswer) -> ModelAnswer:
        """Fill in the answer's call ids (remembered for the tool spans) and record it on the chat span."""
        calls = []
        for tc in answer.tool_calls:
            call = {
                "id": tc.get("id") or f"call_{next(self._ids)}",
                "name": tc["name"],
                "arguments": tc.get("arguments", tc.get("args", {})),
            }
            with self._lock:
                self._pending.setdefault(call["name"], []).append(call["id"])
            calls.append(call)
        answer.tool_calls = calls
        finish = answer.finish_reason or ("tool_call" if calls else "stop")
        span.set_attribute("gen_ai.response.model", model)
        if answer.input_tokens is not None:
            span.set_attribute("gen_ai.usage.input_tokens", int(answer.input_tokens))
        if answer.output_tokens is not None:
            span.set_attribute("gen_ai.usage.output_tokens", int(answer.output_tokens))
        span.set_attribute("gen_ai.output.messages", _genai.output_messages(answer.text, calls, finish))
        return answer

    def take_call_id(self, tool_name: str) -> str | None:
        with self._lock:
            pending = self._pending.get(tool_name)
            return pending.pop(0) if pending else None

    def finish(self, answer: str | None) -> None:
        """The final answer; the run stops ``answered``."""
        self.answer = answer
        if answer is not None:
            self.span.set_attribute("final_result", answer)
            self.span.set_attribute("gen_ai.output.messages", _genai.output_messages(answer, (), "stop"))

    def stop(self, reason: str, message: str = "") -> None:
        """Say why the run ended without an answer: ``deferred``, ``budget_exceeded``, ``max_steps``, ..."""
        self.span.set_attribute("harvester.stop", reason)
        if message:
            self.span.set_attribute("harvester.stop_message", message)

    def feedback(self, value: str) -> None:
        """Flag the run (``negative`` keeps it whatever the sampling rate)."""
        self.span.set_attribute("harvester.feedback", value)


def _conversation(history: Iterable[Any], prompt: str) -> str:
    """``gen_ai.input.messages`` of a turn: the earlier messages (neutral form), then the prompt."""
    earlier = _genai.request(messages=history)
    out = [_genai.genai_message(m) for m in earlier["messages"]]
    return _genai.json_text([*out, _genai.message("user", prompt)])


@contextlib.contextmanager
def agent_run(
    name: str,
    prompt: str,
    *,
    history: Iterable[Any] | None = None,
    model: str | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> Iterator[AgentRun]:
    """One agent invocation as an ``invoke_agent`` span; tool and model calls inside become its children.

    ``history`` is the conversation before this turn, as replay hands it to an agent with a
    ``history`` parameter: messages ``{"role", "content", "tool_calls": [{"name", "call_id", "args"}],
    "tool_call_id"}``. Recorded with the prompt, it lets a harvested later turn replay with it.

    The run travels in the OpenTelemetry context, which threads now inherit too (``seam``): a tool
    run in a thread pool is still this run's call, executed, under its span.
    """
    seam.propagate_into_threads()
    tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": name,
        "gen_ai.input.messages": _conversation(history or (), prompt),
    }
    if model:
        attrs["gen_ai.request.model"] = model
    with tracer.start_as_current_span(f"invoke_agent {name}", attributes=attrs) as span:
        handle = AgentRun(span, name, tracer)
        token = otel_context.attach(otel_context.set_value(RUN, handle))
        try:
            yield handle
        finally:
            otel_context.detach(token)
