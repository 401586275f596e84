"""A conversation's second turn: the run's prompt is the NEW user message, not the conversation's first.

Chat apps send the history with every request (pydantic-ai ``message_history``, a LangChain agent
without a checkpointer, openai-agents ``to_input_list()``). Also here: runs that end on a tool's output.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

from harvester.conventions import runs_from_spans
from tests.frameworks import langchain_agent, openai_agents_agent
from tests.frameworks._otel import capture, finished

FIRST, SECOND = "Weather in Rome?", "And in Paris?"


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"{city}: 20C"


@tool(return_direct=True)
def forecast(city: str) -> str:
    """Tomorrow's forecast; its output goes to the user as it is."""
    return f"Forecast for {city}: sunny"


class Scripted(BaseChatModel):
    """Turn n (n = the user messages so far) asks for ``lookup(city)``, then answers."""

    tool_name: str = "lookup"

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        city = "Paris" if sum(isinstance(m, HumanMessage) for m in messages) > 1 else "Rome"
        if messages[-1].type == "tool":
            msg = AIMessage(content=f"It is 20C in {city}.")
        else:
            msg = AIMessage(
                content="",
                tool_calls=[
                    {"name": self.tool_name, "args": {"city": city}, "id": f"call_{city}", "type": "tool_call"}
                ],
            )
        return ChatResult(generations=[ChatGeneration(message=msg)])


@pytest.mark.parametrize("version", [5, 6])
def test_pydantic_ai_message_history(version: int) -> None:
    def respond(messages: list[Any], info: Any) -> ModelResponse:
        if messages[-1].parts[0].part_kind == "tool-return":
            return ModelResponse(parts=[TextPart("20C")])
        return ModelResponse(parts=[ToolCallPart("weather", {"city": "x"}, f"c{len(messages)}")])

    provider, exporter = capture()
    agent = Agent(FunctionModel(respond), name="chat_agent")
    agent.instrument = InstrumentationSettings(tracer_provider=provider, version=version)

    @agent.tool_plain
    def weather(city: str) -> str:
        """Weather."""
        return "20C"

    first = agent.run_sync(FIRST)
    agent.run_sync(SECOND, message_history=first.all_messages())
    runs = runs_from_spans(finished(exporter))
    assert [r.prompt for r in runs] == [FIRST, SECOND]
    assert [r.trajectory() for r in runs] == [["weather"], ["weather"]]


@pytest.mark.parametrize("instrumentor", langchain_agent.INSTRUMENTORS)
def test_langchain_agent_given_the_whole_conversation(instrumentor: str) -> None:
    provider, exporter = capture()
    with langchain_agent.instrumented(instrumentor, provider):
        graph = create_agent(Scripted(), tools=[lookup], name="chat_agent")
        graph.invoke(
            {
                "messages": [
                    {"role": "user", "content": FIRST},
                    {"role": "assistant", "content": "20C"},
                    {"role": "user", "content": SECOND},
                ]
            }
        )
    (run,) = runs_from_spans(finished(exporter))
    assert run.prompt == SECOND and run.answer == "It is 20C in Paris."
    assert [(c.name, c.args) for c in run.calls] == [("lookup", {"city": "Paris"})]


@pytest.mark.parametrize("instrumentor", langchain_agent.INSTRUMENTORS)
def test_langchain_return_direct_ends_on_the_tool_output(instrumentor: str) -> None:
    provider, exporter = capture()
    with langchain_agent.instrumented(instrumentor, provider):
        graph = create_agent(Scripted(tool_name="forecast"), tools=[forecast], name="chat_agent")
        out = graph.invoke({"messages": [{"role": "user", "content": FIRST}]})
    assert out["messages"][-1].content == "Forecast for Rome: sunny"
    (run,) = runs_from_spans(finished(exporter))
    assert run.stop == "answered" and run.answer == "Forecast for Rome: sunny" and not run.failed


def test_openai_agents_conversation_and_stop_on_first_tool() -> None:
    first, second = runs_from_spans(openai_agents_agent.run_scenario("multiturn"))
    assert (first.prompt, second.prompt) == (
        openai_agents_agent.PROMPTS["multiturn"],
        openai_agents_agent.SECOND_PROMPT,
    )
    assert second.trajectory() == ["get_order"] and second.answer == "A1001 was delivered."
    (run,) = runs_from_spans(openai_agents_agent.run_scenario("stop_on_tool"))
    assert run.stop == "answered" and not run.failed
    assert run.answer == "Refunds are accepted within 30 days of delivery."


@pytest.mark.parametrize("instrumentor", langchain_agent.INSTRUMENTORS)
@pytest.mark.parametrize("exit_behavior", ["end", "error"])
def test_langchain_call_limits_are_a_max_steps_stop(instrumentor: str, exit_behavior: str) -> None:
    """ModelCallLimitMiddleware: with "end" the run ends on the middleware's own message, no model's."""
    from langchain.agents.middleware import ModelCallLimitMiddleware

    class Looping(Scripted):
        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            n = sum(isinstance(m, AIMessage) for m in messages)
            return ChatResult(
                generations=[
                    ChatGeneration(
                        message=AIMessage(
                            content="",
                            tool_calls=[
                                {"name": "lookup", "args": {"city": f"c{n}"}, "id": f"call_{n}", "type": "tool_call"}
                            ],
                        )
                    )
                ]
            )

    provider, exporter = capture()
    with langchain_agent.instrumented(instrumentor, provider):
        graph = create_agent(
            Looping(),
            tools=[lookup],
            name="chat_agent",
            middleware=[ModelCallLimitMiddleware(run_limit=2, exit_behavior=exit_behavior)],
        )
        try:
            graph.invoke({"messages": [{"role": "user", "content": FIRST}]})
        except Exception as exc:
            assert exit_behavior == "error" and "limit" in str(exc).lower()
    (run,) = runs_from_spans(finished(exporter))
    assert run.stop == "max_steps" and run.failed and run.trajectory() == ["lookup", "lookup"]


@pytest.mark.parametrize("instrumentor", langchain_agent.INSTRUMENTORS)
@pytest.mark.parametrize(
    "decision,city",
    [
        ({"type": "approve"}, "Rome"),
        ({"type": "edit", "edited_action": {"name": "lookup", "args": {"city": "Milan"}}}, "Milan"),
    ],
)
def test_a_call_approved_or_edited_by_a_human_keeps_its_args(instrumentor: str, decision: dict, city: str) -> None:
    """The model's request is in the paused run's trace; the resumed run's one-argument tool logs its
    input bare. Its args are the request's, with the value it really ran with (a human may have edited it)."""
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    provider, exporter = capture()
    config = {"configurable": {"thread_id": "hitl"}}
    with langchain_agent.instrumented(instrumentor, provider):
        graph = create_agent(
            Scripted(),
            tools=[lookup],
            name="chat_agent",
            checkpointer=InMemorySaver(),
            middleware=[HumanInTheLoopMiddleware(interrupt_on={"lookup": True})],
        )
        graph.invoke({"messages": [{"role": "user", "content": FIRST}]}, config)
        graph.invoke(Command(resume={"decisions": [decision]}), config)
    paused, resumed = runs_from_spans(finished(exporter))
    assert paused.stop == "deferred" and resumed.stop == "answered"
    assert [(c.name, c.status, c.args) for c in resumed.calls] == [("lookup", "ok", {"city": city})]


@pytest.mark.parametrize("instrumentor", langchain_agent.INSTRUMENTORS)
def test_tool_retries_are_attempts_at_one_call_in_order(instrumentor: str) -> None:
    """ToolRetryMiddleware runs a failing tool again; under OpenInference the failed attempts carry no id."""
    from langchain.agents.middleware import ToolRetryMiddleware

    attempts = {"n": 0}

    @tool
    def flaky(city: str) -> str:
        """The weather, from a service that times out twice."""
        attempts["n"] += 1
        if attempts["n"] < 3:
            raise TimeoutError("weather service timed out")
        return f"{city}: 20C"

    provider, exporter = capture()
    with langchain_agent.instrumented(instrumentor, provider):
        graph = create_agent(
            Scripted(tool_name="flaky"),
            tools=[flaky],
            name="chat_agent",
            middleware=[ToolRetryMiddleware(max_retries=3, initial_delay=0.0, jitter=False)],
        )
        graph.invoke({"messages": [{"role": "user", "content": FIRST}]})
    (run,) = runs_from_spans(finished(exporter))
    assert [(c.call_id, c.status, c.args) for c in run.calls] == [
        ("call_Rome", "error", {"city": "Rome"}),
        ("call_Rome", "error", {"city": "Rome"}),
        ("call_Rome", "ok", {"city": "Rome"}),
    ]


@pytest.mark.parametrize("version", [5, 6])
def test_a_pydantic_ai_output_function_is_a_call(version: int) -> None:
    """TextOutput(fn) runs fn as an execute_tool span ("running output function"): code of the app's that may
    act, so a call (a replay serves it), with the model's text as its input; the answer is still its result."""
    from pydantic_ai import TextOutput

    def shout(text: str) -> str:
        return text.upper()

    provider, exporter = capture()
    agent = Agent(
        FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("z is warm")])),
        name="chat_agent",
        output_type=TextOutput(shout),
    )
    agent.instrument = InstrumentationSettings(tracer_provider=provider, version=version)
    assert agent.run_sync(FIRST).output == "Z IS WARM"
    (run,) = runs_from_spans(finished(exporter))
    assert [(c.name, c.args, c.result, c.status) for c in run.calls] == [
        ("shout", {"input": "z is warm"}, "Z IS WARM", "ok")
    ]
    assert run.answer == "Z IS WARM" and run.stop == "answered" and not run.failed
