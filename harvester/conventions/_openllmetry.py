"""OpenLLMetry (Traceloop): LangChain and other frameworks under ``opentelemetry-instrumentation-*``.

Its model and tool spans use the GenAI keys (``_genai`` reads them, with the callback payloads its
LangChain tool spans carry in ``traceloop.entity.input``); its agents are ``workflow``/``agent`` spans
whose input and output are the framework's own payloads (``traceloop.entity.input`` / ``output``).
"""

from __future__ import annotations

from ..spans import SpanData
from ._genai import agent_name, llm_first_user, llm_messages, read_llm, read_tool
from ._readings import AgentReading, payload_reading
from ._values import MISSING

__all__ = ["agent_name", "llm_first_user", "llm_messages", "read_agent", "read_llm", "read_tool"]


def read_agent(span: SpanData) -> AgentReading:
    a = span.attributes
    return payload_reading(a.get("traceloop.entity.input", MISSING), a.get("traceloop.entity.output", MISSING))
