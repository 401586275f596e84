"""A recorded-model replay answers smolagents' model calls: a ``ToolCallingAgent`` (its model's ``generate``,
or ``generate_stream`` with ``stream_outputs``, run whole or step by step) gets the served answers as
``ChatMessage``s (or stream deltas), runs the tool a served answer asks for, and answers through its
final_answer tool; the requests the server got hold what the live model would have received. The
agent's model raises if called; outside a model-server context it is called, as before."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from smolagents import CodeAgent, OpenAIModel, ToolCallingAgent, tool
from smolagents.models import ChatMessage, MessageRole, Model
from smolagents.monitoring import LogLevel

from harvester.conventions._frameworks import smolagents
from tests.builders.served_models import ListServer as Server
from tests.builders.served_models import answer, serving
from tests.frameworks import tools

PROMPT = "What is the refund policy?"
ANSWER = "Refunds are accepted within 30 days."


ANSWERS = [
    answer(calls=[("kb_search", {"query": "refund policy"}, "call_r1")]),
    answer(calls=[("final_answer", {"answer": ANSWER}, None)]),
]


class _Refusing:
    def create(self, **kwargs: Any) -> Any:
        raise AssertionError("the live model was called")


class NoModel(OpenAIModel):
    """smolagents' OpenAI model on a client that raises: must not be called while the server answers."""

    def create_client(self) -> Any:
        return SimpleNamespace(chat=SimpleNamespace(completions=_Refusing()))


class OwnModel(Model):
    """A Model subclass of the user's own, with its own ``generate``."""

    def generate(self, messages: list[Any], **kwargs: Any) -> ChatMessage:
        raise AssertionError("the live model was called")


@tool
def kb_search(query: str) -> str:
    """Search the support knowledge base and return the best matching article.

    Args:
        query: What to look for.
    """
    return tools.kb_search(query)


def _agent(model: Any = None, **kwargs: Any) -> ToolCallingAgent:
    return ToolCallingAgent(
        tools=[kb_search],
        model=model or NoModel(model_id="live-model", temperature=0.2),
        max_steps=3,
        verbosity_level=LogLevel.OFF,
        **kwargs,
    )


@pytest.fixture
def served() -> Iterator[Server]:
    smolagents.install()
    with serving(Server(ANSWERS)) as server:
        yield server


def _assert_requests(server: Server) -> None:
    first, second = server.requests
    assert "kb_search" in (first["system"] or "")  # smolagents' system prompt lists the tools
    assert [m["role"] for m in first["messages"]] == ["user"]
    assert PROMPT in (first["messages"][0]["content"] or "")
    assert [t["name"] for t in first["tools"] or []] == ["kb_search", "final_answer"]
    assert (first["tools"] or [])[0]["parameters"]["properties"]["query"]["type"] == "string"
    assert first["settings"] == {"temperature": 0.2, "stop": ["Observation:", "Calling tools:"]}
    said = "\n".join(m["content"] or "" for m in second["messages"])
    assert "call_r1" in said and tools.KB["refund policy"] in said  # the recorded call and the tool's output


def test_a_tool_calling_agent_is_answered_from_the_server(served: Server) -> None:
    ran = tools.RAN["kb_search"]
    agent = _agent()
    assert agent.run(PROMPT) == ANSWER
    assert tools.RAN["kb_search"] == ran + 1  # the tool the served answer asked for ran
    assert agent.monitor.get_total_token_counts().input_tokens == 200  # the recorded usage
    _assert_requests(served)


@pytest.mark.parametrize("step_by_step", [False, True])
def test_a_streaming_model_streams_the_served_answers(served: Server, step_by_step: bool) -> None:
    agent = _agent(stream_outputs=True)
    if step_by_step:
        events = list(agent.run(PROMPT, stream=True))
        deltas = [e for e in events if type(e).__name__ == "ChatMessageStreamDelta"]
        assert any(d.tool_calls and d.tool_calls[0].id == "call_r1" for d in deltas)
        assert events[-1].output == ANSWER
    else:
        assert agent.run(PROMPT) == ANSWER
    _assert_requests(served)


def test_a_model_class_of_its_own_is_answered(served: Server) -> None:
    smolagents.install()  # the class is the user's: guarded when the replay's session guards again
    assert _agent(OwnModel(model_id="own")).run(PROMPT) == ANSWER
    assert len(served.requests) == 2


def test_a_code_agents_answer_is_text_holding_code(served: Server) -> None:
    code = f'Thought: answer.\n<code>\nfinal_answer("{ANSWER}")\n</code>'
    served.answers = [answer(code)]
    agent = CodeAgent(
        tools=[kb_search], model=NoModel(model_id="live-model"), max_steps=2, verbosity_level=LogLevel.OFF
    )
    assert agent.run(PROMPT) == ANSWER
    assert served.requests[0]["tools"] == []


def test_a_served_call_is_traced_as_a_model_call(served: Server) -> None:
    from tests.frameworks._otel import capture, finished
    from tests.frameworks.smolagents_agent import instrumented

    provider, exporter = capture()
    with instrumented(provider):
        assert _agent().run(PROMPT) == ANSWER
    llm = [
        s.attributes or {} for s in finished(exporter) if (s.attributes or {}).get("openinference.span.kind") == "LLM"
    ]
    assert len(llm) == 2
    assert llm[0]["llm.output_messages.0.message.tool_calls.0.tool_call.function.name"] == "kb_search"
    assert llm[0]["llm.token_count.prompt"] == 100


def test_outside_a_model_server_the_model_is_called() -> None:
    smolagents.install()
    messages = [ChatMessage(role=MessageRole.USER, content=PROMPT)]
    for call in (
        lambda: NoModel(model_id="live-model").generate(messages),
        lambda: list(NoModel(model_id="live-model").generate_stream(messages)),
        lambda: OwnModel(model_id="own").generate(messages),
    ):
        with pytest.raises(AssertionError, match="the live model was called"):
            call()
