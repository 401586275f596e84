"""``AgentRun.model``: an own loop's model call recorded in GenAI semconv attributes, and served from the
recording in a recorded-model replay (a hand-built ``ModelServer`` in the context) without calling the model."""

import asyncio

import orjson
import pytest
from opentelemetry import context as otel_context

from harvester import seam
from harvester.conventions import runs_from_spans
from harvester.errors import ModelInputChanged
from harvester.instrument import ModelAnswer, agent_run, tool
from tests.builders.capture import in_memory

SYSTEM = "You are a support agent."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look up an order by id.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    },
    {"name": "kb_search", "description": None, "parameters": None},
]
# A later turn: the earlier exchange, in OpenAI's chat form, then the new question.
MESSAGES = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "Where is A1001?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id":"A1001"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_a", "content": {"status": "delivered"}},
    {"role": "assistant", "content": [{"type": "text", "text": "Delivered."}]},
    {"role": "user", "content": "And A1002?"},
]
SETTINGS = {"temperature": 0.2, "max_tokens": 300, "stop": "END", "tool_choice": "auto", "top_p": None}


@tool
def get_order(order_id: str) -> dict:
    """Look up an order by id."""
    return {"order_id": order_id, "status": "shipped"}


@pytest.fixture
def spans():
    return in_memory()


class Server:
    """A recorded-model replay's server, by hand: answers from a list, remembers each request."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.requests = []

    def answer(self, request):
        self.requests.append(request)
        return self.answers.pop(0)


@pytest.fixture
def serving():
    tokens = []

    def serve(server):
        tokens.append(otel_context.attach(otel_context.set_value(seam.MODELS, server)))

    yield serve
    for token in reversed(tokens):
        otel_context.detach(token)


def _never_called():
    raise AssertionError("the model was called")


def _chat(exporter):
    [span] = [s for s in exporter.get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "chat"]
    return span.attributes


def _loop(provider, call):
    with agent_run("support_agent", "And A1002?", tracer_provider=provider) as run:
        answer = run.model(call, model="m-1", system=SYSTEM, messages=MESSAGES, tools=TOOLS, settings=SETTINGS)
        for c in answer.tool_calls:
            get_order(**c["arguments"])
        run.finish("A1002 has shipped.")
    return answer


EXPECTED_REQUEST = {
    "system": "You are a support agent.\n\nAnswer briefly.",
    "messages": [
        {"role": "user", "content": "Where is A1001?", "tool_calls": [], "tool_call_id": None},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"name": "get_order", "call_id": "call_a", "args": {"order_id": "A1001"}}],
            "tool_call_id": None,
        },
        {"role": "tool", "content": '{"status":"delivered"}', "tool_calls": [], "tool_call_id": "call_a"},
        {"role": "assistant", "content": "Delivered.", "tool_calls": [], "tool_call_id": None},
        {"role": "user", "content": "And A1002?", "tool_calls": [], "tool_call_id": None},
    ],
    "tools": [
        {
            "name": "get_order",
            "description": "Look up an order by id.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
        {"name": "kb_search", "description": None, "parameters": None},
    ],
    "settings": {"temperature": 0.2, "max_tokens": 300, "stop": ["END"]},
    "model": "m-1",
}


def test_the_request_and_the_answer_are_recorded_in_genai_semconv_attributes(spans):
    provider, exporter = spans
    answer = _loop(
        provider,
        lambda: {"tool_calls": [{"name": "get_order", "arguments": {"order_id": "A1002"}}], "input_tokens": 90},
    )
    assert answer.tool_calls == [{"id": "call_1", "name": "get_order", "arguments": {"order_id": "A1002"}}]
    assert not answer.served
    a = _chat(exporter)
    assert orjson.loads(a["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Where is A1001?"}]},
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "call_a", "name": "get_order", "arguments": {"order_id": "A1001"}}],
        },
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "call_a", "response": '{"status":"delivered"}'}],
        },
        {"role": "assistant", "parts": [{"type": "text", "content": "Delivered."}]},
        {"role": "user", "parts": [{"type": "text", "content": "And A1002?"}]},
    ]
    assert orjson.loads(a["gen_ai.system_instructions"]) == [{"type": "text", "content": EXPECTED_REQUEST["system"]}]
    assert orjson.loads(a["gen_ai.tool.definitions"]) == [
        {"type": "function", **TOOLS[0]["function"]},
        {"type": "function", "name": "kb_search"},
    ]
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.max_tokens"]) == (0.2, 300)
    assert tuple(a["gen_ai.request.stop_sequences"]) == ("END",)
    assert not any("tool_choice" in k or "top_p" in k for k in a)  # no semconv attribute / unset: left out
    # The GenAI reader reads it back: the conversation before the last user message, the call, the usage.
    [run] = runs_from_spans(exporter.get_finished_spans())
    assert [m.model_dump() for m in run.history] == EXPECTED_REQUEST["messages"][:-1]
    assert run.llm_calls[0].usage.input_tokens == 90 and run.llm_calls[0].usage.output_tokens is None
    assert [(c.name, c.call_id, c.status) for c in run.calls] == [("get_order", "call_1", "ok")]


def test_in_a_recorded_model_replay_the_recorded_answer_is_returned_and_the_model_never_called(spans, serving):
    provider, exporter = spans
    recorded = {
        "text": None,
        "tool_calls": [{"name": "get_order", "call_id": "call_rec", "args": {"order_id": "A1002"}}],
        "finish_reason": "tool_calls",
        "usage": {"input_tokens": 812, "output_tokens": 40},
        "model": "m-1",
    }
    server = Server(recorded)
    serving(server)
    answer = _loop(provider, _never_called)
    assert server.requests == [EXPECTED_REQUEST]  # the live request, in the one form the replay compares
    assert answer == ModelAnswer(
        text=None,
        tool_calls=[{"id": "call_rec", "name": "get_order", "arguments": {"order_id": "A1002"}}],
        input_tokens=812,
        output_tokens=40,
        finish_reason="tool_calls",
        served=True,
    )
    [run] = runs_from_spans(exporter.get_finished_spans())
    assert (run.llm_calls[0].usage.input_tokens, run.llm_calls[0].usage.output_tokens) == (812, 40)
    assert [(c.name, c.call_id, c.status) for c in run.calls] == [("get_order", "call_rec", "ok")]


def test_a_served_call_without_a_recorded_id_gets_one(spans, serving):
    provider, _ = spans
    serving(Server({"text": None, "tool_calls": [{"name": "get_order", "call_id": None, "args": {"order_id": "A1"}}]}))
    assert _loop(provider, _never_called).tool_calls[0]["id"] == "call_1"


def test_a_drifted_request_raises_model_input_changed_into_the_loop(spans, serving):
    provider, exporter = spans

    class Drifted:
        def answer(self, request):
            raise ModelInputChanged(0, ["system prompt changed"])

    serving(Drifted())
    with pytest.raises(ModelInputChanged, match="model_input_changed at step 1: system prompt changed"):
        _loop(provider, _never_called)
    assert not [s for s in exporter.get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "chat"]


def test_outside_a_replay_and_after_the_recording_hands_over_the_model_is_called(spans, serving):
    provider, exporter = spans
    calls = []

    def live():
        calls.append(1)
        return ModelAnswer(text="hello", input_tokens=5, output_tokens=2)

    assert _loop(provider, live).text == "hello" and calls == [1]
    server = Server(None)  # recorded-then-live after a drift: None, the live model answers
    serving(server)
    assert _loop(provider, live).text == "hello" and calls == [1, 1] and len(server.requests) == 1


def test_amodel_serves_and_calls_an_async_model(spans, serving):
    provider, exporter = spans

    async def live():
        return "live text"

    async def loop(call):
        with agent_run("support_agent", "hi", tracer_provider=provider) as run:
            return await run.amodel(call, model="m-1", messages=[{"role": "user", "content": "hi"}])

    assert asyncio.run(loop(live)).text == "live text"
    serving(Server({"text": "recorded", "tool_calls": [], "usage": {"input_tokens": 3, "output_tokens": 1}}))

    async def never():
        raise AssertionError("the model was called")

    served = asyncio.run(loop(never))
    assert (served.text, served.served, served.input_tokens) == ("recorded", True, 3)


def test_model_call_records_the_request_when_given_and_nothing_more_when_not(spans):
    provider, exporter = spans
    with agent_run("support_agent", "hi", tracer_provider=provider) as run:
        run.model_call("m-1", text="a")
        run.model_call("m-1", text="b", system="Be brief.", messages=[{"role": "user", "content": "hi"}], tools=[])
        run.finish("b")
    first, second = [s.attributes for s in exporter.get_finished_spans() if s.name == "chat m-1"]
    assert not any(k in first for k in ("gen_ai.input.messages", "gen_ai.system_instructions"))
    assert orjson.loads(second["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]}
    ]
    assert orjson.loads(second["gen_ai.tool.definitions"]) == []


def test_odd_request_pieces_are_skipped_never_raised(spans):
    provider, exporter = spans
    with agent_run("support_agent", "hi", tracer_provider=provider) as run:
        answer = run.model(
            lambda: None,
            model="m-1",
            messages=["not a message", {"content": "no role"}, {"role": "user", "content": {1: 2**70}}],
            tools=[42, {"description": "no name"}],
            settings={"temperature": object(), "seed": 7},
        )
        run.finish("done")
    assert answer.text is None
    a = _chat(exporter)
    [msg] = orjson.loads(a["gen_ai.input.messages"])
    assert msg["role"] == "user" and "1" in msg["parts"][0]["content"]
    assert orjson.loads(a["gen_ai.tool.definitions"]) == [] and a["gen_ai.request.seed"] == 7
    assert "gen_ai.request.temperature" not in a
