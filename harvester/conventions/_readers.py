"""The convention readers by source name: every reader module answers the same six questions.

``read_llm(span)``, ``read_tool(span)``, ``read_agent(span)``, ``agent_name(span, span_name=...)``,
``llm_first_user(span)``, ``llm_messages(span)`` (a model call's input, for the history). Adding a
convention is adding a module with those and a line here (and teaching ``_classify`` its spans).
"""

from __future__ import annotations

from types import ModuleType

from . import _genai, _openinference, _openllmetry

__all__ = ["READERS"]

READERS: dict[str, ModuleType] = {
    "genai": _genai,
    "harvester": _genai,
    "openinference": _openinference,
    "openllmetry": _openllmetry,
}
