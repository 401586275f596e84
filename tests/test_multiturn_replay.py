"""A later turn of a conversation: harvested with the messages before it, replayed with them.

The agent here finds the order a follow-up question is about in the conversation; asked the turn
alone it can only ask back "Which order do you mean?", with no tool call. The production runs are
real pydantic-ai and LangChain agents (offline scripted models); their spans hold the history.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic_ai import Agent
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

import harvester
from harvester.case import AgentCase, save_case
from harvester.cli import main as cli
from harvester.conventions import runs_from_spans
from harvester.harvest import case_from_run
from harvester.replay import replay as run_replay
from tests.frameworks import langchain_agent
from tests.frameworks._otel import capture, finished

FIRST, SECOND = "Where is order A1001?", "And when will it arrive?"
ASK_BACK = "Which order do you mean?"
ORDERS = {"A1001": {"order_id": "A1001", "status": "shipped", "eta": "2026-12-04"}}


RAN: list[str] = []  # every tool body that ran for real: production does, a replay never must


def replay(cases, build):
    """A replay that also proves no tool body ran for real."""
    before = len(RAN)
    report = run_replay(cases, build)
    assert len(RAN) == before, f"a tool body ran during the replay: {RAN[before:]}"
    assert report.metrics()["live_tool_calls"] == 0
    return report


def get_order(order_id: str) -> dict:
    """Look up an order."""
    RAN.append("get_order")
    return ORDERS[order_id]


def _order_in(texts: list[str]) -> str | None:
    found = [m for t in texts for m in re.findall(r"\bA\d{4}\b", t)]
    return found[-1] if found else None


def _answer(result: str) -> str:
    """The answer from a tool result as the model saw it: JSON, or a Python dict's repr (openai-agents)."""
    try:
        data = orjson.loads(result)
    except orjson.JSONDecodeError:
        data = ast.literal_eval(result)
    return f"Order {data.get('order_id')} is {data.get('status')}, arriving {data.get('eta')}."


# -- pydantic-ai ----------------------------------------------------------------------------------
def _pai_respond(messages: list[Any], info: Any) -> ModelResponse:
    last = messages[-1].parts[-1]
    if isinstance(last, ToolReturnPart):
        content = last.content if isinstance(last.content, str) else orjson.dumps(last.content).decode()
        return ModelResponse(parts=[TextPart(_answer(content))])
    said = [
        p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)
    ]
    order = _order_in([s for s in said if isinstance(s, str)])
    if order is None:
        return ModelResponse(parts=[TextPart(ASK_BACK)])
    return ModelResponse(parts=[ToolCallPart("get_order", {"order_id": order}, f"call_{len(messages)}")])


def pai_agent(instrument: Any = None) -> Agent:
    agent = Agent(FunctionModel(_pai_respond, model_name="scripted"), name="orders_agent", tools=[get_order])
    agent.instrument = instrument
    return agent


def pai_second_turn_case() -> AgentCase:
    provider, exporter = capture()
    agent = pai_agent(InstrumentationSettings(tracer_provider=provider))
    first = agent.run_sync(FIRST)
    second = agent.run_sync(SECOND, message_history=first.all_messages())
    assert second.output.startswith("Order A1001 is shipped")
    run = runs_from_spans(finished(exporter))[1]
    return case_from_run(run).model_copy(update={"status": "accepted"})


def test_a_pydantic_ai_second_turn_holds_its_history_and_replays_with_it():
    case = pai_second_turn_case()
    assert case.prompt == SECOND
    assert [(m.role, m.content) for m in case.history] == [
        ("user", FIRST),
        ("assistant", None),
        ("tool", orjson.dumps(ORDERS["A1001"]).decode()),
        ("assistant", "Order A1001 is shipped, arriving 2026-12-04."),
    ]
    assert [(c.name, c.args) for c in case.history[1].tool_calls] == [("get_order", {"order_id": "A1001"})]
    assert not any("conversation" in n for n in case.review_notes)
    (r,) = replay([case], pai_agent).results
    assert r.passed, r.reasons()
    assert r.trajectory == ["get_order"] and r.tool_calls == 1  # the earlier turn's call is context, not re-run


def test_the_second_turn_fails_when_the_agent_is_not_given_the_history():
    case = pai_second_turn_case()
    (alone,) = replay([case.model_copy(update={"history": []})], pai_agent).results
    assert not alone.passed and alone.answer == ASK_BACK  # what the first version greenlit

    def own_loop_without_history():  # a callable with no `history` parameter cannot be given them
        return lambda prompt: ASK_BACK

    (lost,) = replay([case], own_loop_without_history).results
    assert not lost.passed
    (check,) = [c for c in lost.checks if c.name == "history"]
    assert "4 earlier messages" in check.detail and "`history` parameter" in check.detail


# -- LangChain ------------------------------------------------------------------------------------
class OrdersChat(BaseChatModel):
    """Finds the order in the conversation's human messages; answers from the tool message."""

    @property
    def _llm_type(self) -> str:
        return "orders-chat"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if isinstance(messages[-1], ToolMessage):
            return ChatResult(
                generations=[ChatGeneration(message=AIMessage(content=_answer(str(messages[-1].content))))]
            )
        order = _order_in([str(m.content) for m in messages if isinstance(m, HumanMessage)])
        if order is None:
            msg = AIMessage(content=ASK_BACK)
        else:
            call = {"name": "get_order", "args": {"order_id": order}, "id": f"lc_{len(messages)}", "type": "tool_call"}
            msg = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=msg)])


def lc_agent() -> Any:
    return create_agent(OrdersChat(), tools=[get_order], name="orders_agent")


@pytest.mark.parametrize("instrumentor", langchain_agent.INSTRUMENTORS)
def test_a_langchain_second_turn_replays_with_its_history(instrumentor: str):
    provider, exporter = capture()
    with langchain_agent.instrumented(instrumentor, provider):
        graph = lc_agent()
        state = graph.invoke({"messages": [{"role": "user", "content": FIRST}]})
        graph.invoke({"messages": [*state["messages"], {"role": "user", "content": SECOND}]})
    run = runs_from_spans(finished(exporter))[-1]
    case = case_from_run(run).model_copy(update={"status": "accepted"})
    assert case.prompt == SECOND
    assert [m.role for m in case.history] == ["user", "assistant", "tool", "assistant"]
    assert case.history[1].tool_calls[0].name == "get_order"
    (r,) = replay([case], lc_agent).results
    assert r.passed, r.reasons()
    assert r.trajectory == ["get_order"]
    (alone,) = replay([case.model_copy(update={"history": []})], lc_agent).results
    assert not alone.passed and alone.answer == ASK_BACK


# -- own loop -------------------------------------------------------------------------------------
@harvester.tool
def lookup_order(order_id: str) -> dict:
    RAN.append("lookup_order")
    return ORDERS[order_id]


def own_build(provider: Any = None):
    """An own loop: the conversation comes in as `history` (what replay hands it) and is recorded."""

    def agent(prompt: str, history: list[dict] | None = None) -> str:
        history = history or []
        with harvester.agent_run("orders_loop", prompt, history=history, tracer_provider=provider) as run:
            order = _order_in([*(m["content"] for m in history if m["role"] == "user" and m["content"]), prompt])
            if order is None:
                run.finish(ASK_BACK)
                return ASK_BACK
            run.model_call("m", tool_calls=[{"name": "lookup_order", "args": {"order_id": order}}])
            answer = _answer(orjson.dumps(lookup_order(order)).decode())
            run.finish(answer)
            return answer

    return agent


def test_an_own_loop_records_its_history_and_is_given_it_back():
    provider, exporter = capture()
    earlier = [
        {"role": "user", "content": FIRST, "tool_calls": [], "tool_call_id": None},
        {"role": "assistant", "content": "It is shipped.", "tool_calls": [], "tool_call_id": None},
    ]
    own_build(provider)(SECOND, history=earlier)
    (run,) = runs_from_spans(finished(exporter))
    assert run.usage.input_tokens is None  # model_call without counts: unknown, not 0
    case = case_from_run(run).model_copy(update={"status": "accepted"})
    assert [m.model_dump() for m in case.history] == earlier and case.prompt == SECOND
    (r,) = replay([case], own_build).results
    assert r.passed, r.reasons()
    (alone,) = replay([case.model_copy(update={"history": []})], own_build).results
    assert not alone.passed and alone.answer == ASK_BACK


# -- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "history, field",
    [
        ("hello", "history"),
        ([{"role": "wizard", "content": "hi"}], "history.0.role"),
        ([{"content": "hi"}], "history.0.role"),
        (["hi"], "history.0"),
    ],
)
def test_a_history_that_is_not_a_list_of_messages_is_one_line_exit_2(tmp_path, history, field):
    case = pai_second_turn_case()
    path = save_case(case, tmp_path)
    data = orjson.loads(path.read_bytes())
    data["history"] = history
    path.write_bytes(orjson.dumps(data))
    before = path.read_bytes()
    res = CliRunner().invoke(cli, ["cases", "show", case.id, "--cases", str(tmp_path)])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and path.name in lines[0] and field in lines[0], res.output
    assert path.read_bytes() == before


# -- OpenAI Agents SDK ----------------------------------------------------------------------------
def _oa_agent() -> Any:
    from agents import Agent as OAAgent
    from agents import function_tool

    from tests.frameworks.openai_agents_agent import ScriptedModel

    class OrdersModel(ScriptedModel):
        """Finds the order in the input items' user messages; answers from a function call's output."""

        def step(self, input: Any) -> Any:
            items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
            last = items[-1] if items else {}
            if isinstance(last, dict) and last.get("type") == "function_call_output":
                return _answer(str(last.get("output")))
            said = [str(i.get("content")) for i in items if isinstance(i, dict) and i.get("role") == "user"]
            order = _order_in(said)
            return ASK_BACK if order is None else [("get_order", {"order_id": order}, f"oa_{len(items)}")]

    return OAAgent(name="orders_agent", model=OrdersModel("multiturn"), tools=[function_tool(get_order)])


@pytest.mark.slow
def test_an_openai_agents_second_turn_replays_with_its_history():
    import asyncio

    from agents import Runner

    from tests.frameworks import openai_agents_agent

    provider, exporter = capture()

    async def chat() -> None:
        agent = _oa_agent()
        first = await Runner.run(agent, FIRST)
        await Runner.run(agent, [*first.to_input_list(), {"role": "user", "content": SECOND}])

    with openai_agents_agent.instrumented(provider):
        asyncio.run(chat())
    run = runs_from_spans(finished(exporter))[-1]
    case = case_from_run(run).model_copy(update={"status": "accepted"})
    assert case.prompt == SECOND
    assert [m.role for m in case.history] == ["user", "assistant", "tool", "assistant"]
    (r,) = replay([case], _oa_agent).results
    assert r.passed, r.reasons()
    (alone,) = replay([case.model_copy(update={"history": []})], _oa_agent).results
    assert not alone.passed and alone.answer == ASK_BACK


def test_a_case_whose_spans_hold_no_history_says_so_and_accept_warns(tmp_path):
    from harvester.case import CaseFolder
    from tests.builders.runs import call, run

    case = case_from_run(run(call("get_order"), prompt=SECOND, history=None))
    (note,) = case.review_notes
    assert "do not hold the conversation" in note and case.blocking_notes() == []  # informs, never blocks
    assert case_from_run(run(call("get_order"), prompt=SECOND)).review_notes == []  # history [] is known
    CaseFolder(tmp_path).save(case)
    res = CliRunner().invoke(cli, ["accept", case.id, "--cases", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert f"warning: {case.id}: {note}" in res.stderr


def test_history_from_older_openllmetry_indexed_prompts_and_hidden_content():
    from tests.builders.store import agent_trace

    chat, tool, root = agent_trace("d" * 32)
    legacy = {k: v for k, v in chat.attributes.items() if k != "gen_ai.input.messages"} | {
        "gen_ai.prompt.0.role": "system",
        "gen_ai.prompt.0.content": "You are helpful.",
        "gen_ai.prompt.1.role": "user",
        "gen_ai.prompt.1.content": FIRST,
        "gen_ai.prompt.2.role": "assistant",
        "gen_ai.prompt.2.tool_calls.0.name": "get_order",
        "gen_ai.prompt.2.tool_calls.0.id": "t1",
        "gen_ai.prompt.2.tool_calls.0.arguments": '{"order_id": "A1001"}',
        "gen_ai.prompt.3.role": "tool",
        "gen_ai.prompt.3.tool_call_id": "t1",
        "gen_ai.prompt.3.content": "shipped",
        "gen_ai.prompt.4.role": "user",
        "gen_ai.prompt.4.content": SECOND,
    }
    (run,) = runs_from_spans([dataclasses.replace(chat, attributes=legacy), tool, root])
    assert [(m.role, m.content, m.tool_call_id) for m in run.history] == [
        ("user", FIRST, None),
        ("assistant", None, None),
        ("tool", "shipped", "t1"),
    ]
    assert run.history[1].tool_calls[0].args == {"order_id": "A1001"}
    hidden = orjson.dumps([{"role": "user", "parts": [{"type": "text"}]}]).decode()  # content capture off
    (run,) = runs_from_spans(
        [dataclasses.replace(chat, attributes={**chat.attributes, "gen_ai.input.messages": hidden}), tool, root]
    )
    assert run.history is None


def test_the_same_follow_up_after_different_questions_is_two_situations():
    from harvester.harvest import signature
    from harvester.model import Message
    from tests.builders.runs import call, run

    def turn(before: str | None):
        history = [Message(role="user", content=before)] if before else []
        return run(call("get_order"), prompt="And can you refund it?", history=history)

    assert signature(turn("Where is A1001?")) != signature(turn("Is B2002 shipped?"))
    assert signature(turn("Where is A1001?")) == signature(turn("Where is A1002?"))  # digits collapse, as prompts
    from harvester.canonical import digest

    # a first turn keeps the signature it always had: cases already harvested still match their runs
    assert signature(turn(None)) == digest(["and can you refund it", ["get_order"], None])
