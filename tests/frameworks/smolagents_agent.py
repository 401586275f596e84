"""A smolagents ``ToolCallingAgent`` support agent on a scripted offline model, traced by OpenInference.

``SmolagentsInstrumentor`` wraps ``generate`` on the model classes smolagents EXPORTS (it walks
``vars(smolagents)``), so a ``Model`` subclass that overrides ``generate`` itself is never traced. The
scripted model is therefore an ``OpenAIModel`` whose client is an offline fake: smolagents' own
``generate`` runs (and is traced) and the fake's ``chat.completions.create`` answers from the script
with real ``openai`` ``ChatCompletion`` objects. Nothing touches the network.

Scenarios (``SCENARIOS``): ``happy``; ``tool_error`` (``check_inventory`` raises; smolagents hands EVERY
tool error back to the model, there is no fatal tool error, so the model answers that it cannot tell);
``retry`` (``get_order`` raises for an unknown id, the model retries with other args). smolagents has no
tool-approval step, so there is no ``denied`` scenario. Answers go through the ``final_answer`` tool, as
smolagents requires. Turn n of a run reports ``100 n`` input and ``10 n`` output tokens.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from openai.types.chat import ChatCompletion
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from smolagents import OpenAIModel, ToolCallingAgent, tool
from smolagents.monitoring import LogLevel

from . import tools
from ._otel import capture, finished
from .pydantic_ai_agent import AGENT_NAME, MODEL_NAME, PROMPTS, USAGE
from .pydantic_ai_agent import ANSWERS as _ANSWERS
from .pydantic_ai_agent import SCRIPTS as _SCRIPTS

SCENARIOS = ("happy", "tool_error", "retry")
ANSWERS = {**_ANSWERS, "tool_error": "I cannot check the stock of SKU-1 right now: the inventory service is down."}


def _final(answer: str, call_id: str) -> list[tuple[str, dict, str]]:
    return [("final_answer", {"answer": answer}, call_id)]


# The pydantic-ai scripts, with each text answer given through smolagents' final_answer tool.
SCRIPTS: dict[str, list[Any]] = {
    "happy": [_SCRIPTS["happy"][0], _final(ANSWERS["happy"], "call_3")],
    "tool_error": [_SCRIPTS["tool_error"][0], _final(ANSWERS["tool_error"], "call_2")],
    "retry": [*_SCRIPTS["retry"][:2], _final(ANSWERS["retry"], "call_3")],
    # never calls final_answer: after max_steps (5) smolagents asks the model for an answer itself
    "max_steps": [[("kb_search", {"query": f"refund policy {n}"}, f"call_{n}")] for n in range(1, 6)]
    + ["I could not find it in time."],
}
ANSWERS["max_steps"] = "I could not find it in time."
# a managed agent: the model "calls" research_agent, which smolagents runs as an agent, not a tool
RESEARCH_AGENT = "research_agent"
SCRIPTS["managed"] = [
    [(RESEARCH_AGENT, {"task": "Find the refund policy."}, "call_1")],
    _final("Refunds are accepted within 30 days.", "call_2"),
]
SCRIPTS["managed_research"] = [_SCRIPTS["happy"][0][:1], _final("Within 30 days of delivery.", "call_r2")]
ANSWERS["managed"] = "Refunds are accepted within 30 days."
# the managed agent answers, then the outer agent runs out of steps: its own forced answer is the run's
SCRIPTS["managed_max_steps"] = (
    [SCRIPTS["managed"][0]]
    + [[("kb_search", {"query": f"refund policy {n}"}, f"call_{n}")] for n in range(2, 6)]
    + ["I could not find it in time."]
)
ANSWERS["managed_max_steps"] = "I could not find it in time."
PROMPTS = {
    **PROMPTS,
    "max_steps": "Search until you find it.",
    "managed": "What is the refund policy?",
    "managed_max_steps": "Search until you find it.",
}
_LOCK = threading.Lock()


# -- tools: smolagents' @tool needs an Args section in the docstring, so each shared tool gets a wrapper
@tool
def kb_search(query: str) -> str:
    """Search the support knowledge base and return the best matching article.

    Args:
        query: What to look for.
    """
    return tools.kb_search(query)


@tool
def get_order(order_id: str) -> dict:
    """Look up an order by its id.

    Args:
        order_id: The order id, like A1001.
    """
    return tools.get_order(order_id)


@tool
def check_inventory(sku: str) -> str:
    """Check stock for a product.

    Args:
        sku: The product's SKU.
    """
    return tools.check_inventory(sku)


# -- the scripted model --------------------------------------------------------------------------
class _Completions:
    def __init__(self, scenario: str) -> None:
        self.scenario = scenario
        self.turn = 0

    def create(self, **kwargs: Any) -> ChatCompletion:
        self.turn += 1
        step = SCRIPTS[self.scenario][self.turn - 1]
        inp, out = USAGE[self.turn]
        if isinstance(step, str):
            finish, message = "stop", {"role": "assistant", "content": step}
        else:
            finish, message = (
                "tool_calls",
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                        for name, args, call_id in step
                    ],
                },
            )
        return ChatCompletion.model_validate(
            {
                "id": f"chatcmpl-{self.scenario}-{self.turn}",
                "object": "chat.completion",
                "created": 0,
                "model": MODEL_NAME,
                "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                "usage": {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out},
            }
        )


class ScriptedModel(OpenAIModel):
    """smolagents' OpenAI-compatible model, answering from ``SCRIPTS[scenario]`` through an offline client."""

    def __init__(self, scenario: str) -> None:
        self.scenario = scenario
        super().__init__(model_id=MODEL_NAME)

    def create_client(self) -> Any:
        return SimpleNamespace(chat=SimpleNamespace(completions=_Completions(self.scenario)))


def build_agent(scenario: str, *, deterministic: bool = False) -> ToolCallingAgent:
    managed = []
    if scenario in ("managed", "managed_max_steps"):
        managed = [
            ToolCallingAgent(
                tools=[kb_search],
                model=ScriptedModel("managed_research"),
                name=RESEARCH_AGENT,
                description="Researches the support knowledge base.",
                max_steps=3,
                verbosity_level=LogLevel.OFF,
            )
        ]
    return ToolCallingAgent(
        tools=[kb_search, get_order, check_inventory],
        managed_agents=managed,
        model=ScriptedModel(scenario),
        name=AGENT_NAME,
        max_steps=5,
        verbosity_level=LogLevel.OFF,
        max_tool_threads=1 if deterministic else None,  # one turn's calls otherwise run in parallel threads
    )


@contextmanager
def instrumented(provider: TracerProvider, *, include_content: bool = True) -> Iterator[None]:
    """Instrument smolagents for one run, then restore everything it patched."""
    from openinference.instrumentation import TraceConfig
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    config = TraceConfig(
        hide_inputs=not include_content,
        hide_outputs=not include_content,
        hide_input_messages=not include_content,
        hide_output_messages=not include_content,
    )
    inst = SmolagentsInstrumentor()
    inst.instrument(tracer_provider=provider, config=config)
    try:
        yield
    finally:
        inst.uninstrument()


def run_scenario(
    scenario: str,
    tracer_provider: TracerProvider | None = None,
    *,
    include_content: bool = True,
    deterministic: bool = False,
    stream: bool = False,
) -> list[ReadableSpan]:
    """Run one scenario and return its finished spans (``stream``: as GradioUI runs an agent, step by step)."""
    provider, exporter = capture(tracer_provider, deterministic=deterministic)
    with _LOCK, instrumented(provider, include_content=include_content):
        agent = build_agent(scenario, deterministic=deterministic)
        if stream:
            answer = list(agent.run(PROMPTS[scenario], stream=True))[-1].output
        else:
            answer = agent.run(PROMPTS[scenario])
        assert answer == ANSWERS[scenario], answer
    return finished(exporter)
