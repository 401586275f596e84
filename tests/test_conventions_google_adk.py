"""Google ADK under ``openinference-instrumentation-google-adk``, driven for real with the app's scripted
offline model (``tests/apps/google_adk_app.py``): what its spans read back as, scenario by scenario.

ADK records a turn's parallel calls with a span summing them up (``execute_tool (merged)``), a tool's
output as its function response (``{"id", "name", "response"}``) and an agent span's output as its final
``Event``; its module (``harvester/conventions/_frameworks/google_adk.py``) says so. A tool that raises
fails ADK's run (no retry: ADK hands no exception back to the model), and ADK has no approval step here.
"""

# ruff: noqa: E402 - the framework is imported once it is known to be installed (``require``)
from __future__ import annotations

from typing import Any

from harvester.conventions._frameworks import google_adk
from tests.builders.installed import require

require(google_adk)

from google.adk.models.llm_response import LlmResponse
from google.genai import types

from harvester.conventions import runs_from_spans
from tests.apps import google_adk_app as app
from tests.apps import shop
from tests.frameworks._otel import capture, finished

PROMPT = "Can I still return order A1001?"


def get_order(order_id: str) -> dict:
    """Look up an order by its id (an unknown id raises)."""
    if order_id not in shop.ORDERS:
        raise KeyError(f"no order {order_id}")
    return shop.ORDERS[order_id]


def traced(agent: Any) -> list:
    provider, exporter = capture()
    with app.instrumented(provider):
        try:
            app.run(agent, PROMPT)
        except Exception:  # the run failed: its spans say how
            pass
    return finished(exporter)


def test_parallel_calls_read_as_the_calls_and_the_event_as_the_answer() -> None:
    spans = traced(app.agent(shop.STEPS["baseline"], [shop.kb_search, shop.get_order]))
    assert "execute_tool (merged)" in [s.name for s in spans]  # ADK sums the parallel calls up
    (run,) = runs_from_spans(spans)
    assert run.agent == "support_agent" and run.model == app.MODEL and run.prompt == PROMPT
    assert [(c.name, c.call_id, c.args, c.status) for c in run.calls] == [
        ("kb_search", "call_1", {"query": "refund policy"}, "ok"),
        ("get_order", "call_2", {"order_id": "A1001"}, "ok"),
    ]
    # the function response's response: a plain value wrapped by ADK, a dict as the tool returned it
    assert [c.result for c in run.calls] == [{"result": shop.KB["refund policy"]}, shop.ORDERS["A1001"]]
    assert run.answer == shop.ANSWER and run.stop == "answered" and run.content_captured
    assert run.usage.input_tokens == 300 and run.usage.output_tokens == 30
    assert [len(c.requests) for c in run.llm_calls] == [2, 0]
    first = run.llm_calls[0].request
    assert first is not None and first.system is not None and first.system.startswith(shop.INSTRUCTIONS)
    assert [t.name for t in first.tools or []] == ["kb_search", "get_order"]


def test_the_answer_is_what_the_user_saw_not_what_the_model_said() -> None:
    # an after-model callback (a guardrail, a redaction) rewrites the text: the model call's span keeps
    # the model's, the agent span's event holds what the user was shown
    def signed(callback_context: Any, llm_response: LlmResponse) -> LlmResponse | None:
        content = llm_response.content
        if content is None or not content.parts or not content.parts[0].text:
            return None
        return LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text=content.parts[0].text + " -- Shop")])
        )

    steps = [[("get_order", {"order_id": "A1001"}, "call_1")], "Delivered 12 days ago."]
    agent = app.agent(steps, [shop.get_order])
    agent.after_model_callback = signed
    (run,) = runs_from_spans(traced(agent))
    assert run.llm_calls[-1].text == "Delivered 12 days ago."
    assert run.answer == "Delivered 12 days ago. -- Shop" and run.stop == "answered"
    assert [c.name for c in run.calls] == ["get_order"]


def test_a_tool_that_raises_fails_the_run() -> None:
    steps = [[("get_order", {"order_id": "B2002"}, "call_1")], "never reached"]
    (run,) = runs_from_spans(traced(app.agent(steps, [get_order])))
    (call,) = run.calls
    assert call.name == "get_order" and call.status == "error" and call.error is not None
    assert call.error.type == "KeyError" and "B2002" in call.error.message
    assert run.stop == "error" and run.answer is None
