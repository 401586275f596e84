"""Instrumentation for apps without a framework: ``agent_run()``, ``AgentRun.model`` and ``@tool``.

They emit the same GenAI-semconv spans pydantic-ai does (``invoke_agent``, ``chat``, ``execute_tool``),
so the conventions code reads them like any framework's. ``@tool`` and ``AgentRun.model`` are also
replay seams: inside a replay a tool body never runs, and in a recorded-model replay the model is never
called (a framework's own dispatch is routed by its module in ``conventions``; this is for your own loop).

Production code calls these, so they never raise into the app: a value orjson refuses (a non-string
key, an int of 64 bits or more, a lone surrogate, nesting past orjson's depth) is recorded in a
best-effort form.
"""

from ._run import TRACER_NAME, AgentRun, ModelAnswer, agent_run
from ._tool import tool

__all__ = ["TRACER_NAME", "AgentRun", "ModelAnswer", "agent_run", "tool"]
