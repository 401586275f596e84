"""Spans to ``Run``s: one reader per convention, and the assembly that makes runs of their readings.

- ``_classify``: which convention a span speaks and what it is (agent, model call, tool call).
- ``_genai`` (OTel GenAI semconv: pydantic-ai, harvester's own spans), ``_openinference`` (the OpenAI
  Agents SDK, smolagents, LangChain), ``_openllmetry``: the readers, one module each (``_readers``).
- ``_frameworks``: one module per framework, all harvester knows of it: what it records its own way (a
  handoff, an answer tool, the exceptions that stop or pause it), which the readers and the assembly
  ask, and how a replay serves its tools (``FRAMEWORKS``, each an ``Adapter``, which ``adapters`` runs).
- ``_readings``: what a reader makes of a span (typed), and the shape-based readers they share.
- ``_pairing``: which tool span answered which request; ``_assembly``: one run from its spans;
  ``_traces``: a trace's spans to its runs.
- ``_values``, ``_errors``: the small readers every convention uses.
- ``_providers``: the hosts a run's model calls reached (its endpoints, or its providers' documented hosts).

The same key means different things per producer (``gen_ai.tool.call.arguments`` is the args object in
pydantic-ai and a callback payload in OpenLLMetry), so each payload is read by its shape as well as its
producer. Nothing raises on odd input: a payload that does not parse is a string, a value of the wrong
type is ignored, a span of no known convention is skipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import lazy

if TYPE_CHECKING:
    from ..model import Run
    from ._assembly import FEEDBACK_KEYS
    from ._classify import (
        GENAI_OP,
        INCOMPLETE_KEY,
        OI_KIND,
        TL_KIND,
        ancestors,
        is_agent_span,
        may_hold_run,
        subtree,
    )
    from ._frameworks import CLIENTS, FRAMEWORKS, Adapter, Loadable, agent_calls, client_scopes, untraced, with_history
    from ._frameworks.openai_agents import HANDOFF_PREFIX, handoff_tool_name
    from ._providers import EVERY_PROVIDER_HOST, PROVIDER_HOSTS, documented_hosts, model_hosts
    from ._traces import agent_names, run_data_from_spans
    from ._values import PLACEHOLDERS

# Loaded on first use: the span processor needs only the classification to group spans, and (as it
# defers normalizing to the store's first read) seldom the readers and the assembly.
_HOMES = {
    "FEEDBACK_KEYS": "_assembly",
    "agent_calls": "_frameworks",
    "Adapter": "_frameworks",
    "CLIENTS": "_frameworks",
    "FRAMEWORKS": "_frameworks",
    "Loadable": "_frameworks",
    "client_scopes": "_frameworks",
    "untraced": "_frameworks",
    "with_history": "_frameworks",
    "agent_names": "_traces",
    "run_data_from_spans": "_traces",
    "HANDOFF_PREFIX": "_frameworks.openai_agents",
    "ancestors": "_classify",
    "GENAI_OP": "_classify",
    "INCOMPLETE_KEY": "_classify",
    "OI_KIND": "_classify",
    "TL_KIND": "_classify",
    "handoff_tool_name": "_frameworks.openai_agents",
    "is_agent_span": "_classify",
    "may_hold_run": "_classify",
    "subtree": "_classify",
    "PLACEHOLDERS": "_values",
    "EVERY_PROVIDER_HOST": "_providers",
    "PROVIDER_HOSTS": "_providers",
    "documented_hosts": "_providers",
    "model_hosts": "_providers",
}

__all__ = [
    "CLIENTS",
    "EVERY_PROVIDER_HOST",
    "FEEDBACK_KEYS",
    "FRAMEWORKS",
    "GENAI_OP",
    "HANDOFF_PREFIX",
    "INCOMPLETE_KEY",
    "OI_KIND",
    "PLACEHOLDERS",
    "PROVIDER_HOSTS",
    "TL_KIND",
    "Adapter",
    "Loadable",
    "agent_calls",
    "agent_names",
    "ancestors",
    "client_scopes",
    "documented_hosts",
    "handoff_tool_name",
    "is_agent_span",
    "may_hold_run",
    "model_hosts",
    "run_data_from_spans",
    "runs_from_spans",
    "subtree",
    "untraced",
    "with_history",
]


__getattr__ = lazy(__name__, _HOMES, globals())


def runs_from_spans(spans: Any) -> list[Run]:
    """One Run per outermost agent span, over any mix of traces; spans of other conventions are ignored.

    ``spans``: ``SpanData``, SDK ``ReadableSpan``s, OTLP/JSON span objects or whole OTLP/JSON documents.
    Runs come out in trace order of first appearance, then by start time.
    """
    from ..model import Run
    from ._traces import run_data_from_spans

    return [Run.from_data(data) for data in run_data_from_spans(spans)]
