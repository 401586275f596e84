"""A small instrumented agent for replay tests: spans via ``agent_run``, tools via ``@harvester.tool``,
whose live bodies fail loudly (a replay must never run them), and a case file to replay it against."""

from __future__ import annotations

import harvester
from harvester.canonical import fixture_key
from harvester.case import AgentCase
from harvester.fixtures import ToolFailure
from harvester.instrument import agent_run


@harvester.tool
def kb_search(query: str) -> str:
    raise AssertionError("live kb_search called inside a replay")


@harvester.tool
def issue_refund(order_id: str) -> str:
    raise AssertionError("live issue_refund called inside a replay")


@harvester.tool
def get_order(order_id: str) -> str:
    raise AssertionError("live get_order called inside a replay")


TOOLS = {"kb_search": kb_search, "issue_refund": issue_refund, "get_order": get_order}


def scripted(*calls, answer="{results}"):
    """An agent that makes ``calls`` (name, args) in order, then answers; tool failures become answers."""

    def agent(prompt):
        results = []
        with agent_run("support", prompt, model="m1") as run:
            for name, args in calls:
                run.model_call("m1", input_tokens=100, output_tokens=10, tool_calls=[{"name": name, "arguments": args}])
                try:
                    results.append(TOOLS[name](**args))
                except ToolFailure as exc:
                    results.append(f"I'm sorry, {name} failed ({exc.type})")
            text = answer.format(results=" | ".join(map(str, results)))
            run.model_call("m1", input_tokens=100, output_tokens=10, text=text)
            run.finish(text)
        return text

    return agent


def fx(tool, args, result=None, error=None):
    out = {"key": fixture_key(tool, args), "tool": tool, "args": args, "result": result}
    if error:
        out["error"] = error
    return out


def case(id="c1", **kw) -> AgentCase:
    base = {
        "id": id,
        "prompt": "Can I return A1001?",
        "why": "refund policy regression",
        "status": "accepted",
        "required_elements": ["30 days"],
        "appropriate_tools": ["kb_search"],
        "forbidden_tools": ["issue_refund"],
        "min_steps": 1,
        "fixtures": [fx("kb_search", {"query": "refund policy"}, "Refunds within 30 days.")],
        "recorded": {"trajectory": ["kb_search"], "stop": "answered"},
    }
    base.update(kw)
    return AgentCase.model_validate(base)


GOOD = scripted(("kb_search", {"query": "refund policy"}))


def good():
    """``--agent tests.builders.agents:good``: searches the policy and answers with it."""
    return GOOD


def made_up():
    """``--agent tests.builders.agents:made_up``: the regression, searching but answering without the policy."""
    return scripted(("kb_search", {"query": "refund policy"}), answer="You can return it any time.")


def leaky():
    """``--agent tests.builders.agents:leaky``: answers with a secret it should never have said."""
    return scripted(
        ("kb_search", {"query": "refund policy"}), answer="use key sk-proj-4f9aQ2mZ8kL1pX7vB3nR6tY0wE5uI2oA9sD"
    )
