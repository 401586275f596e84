"""The convention readers by source name, each a module that is a ``Reader``.

Adding a convention is adding a module with the ``Reader``'s functions and a line in ``READERS`` (and
teaching ``_classify`` its spans): mypy checks the module against the protocol through the table's
type, and ``tests/test_plugins.py`` runs every registered reader through the same contract.
"""

from __future__ import annotations

from typing import Protocol

from ..model import MessageData
from ..spans import SpanData
from . import _genai, _openinference, _openllmetry
from ._readings import AgentReading, LlmReading, ToolReading

__all__ = ["READERS", "Reader"]


class Reader(Protocol):
    """What every convention's reader answers about a span of its convention (never raising)."""

    def read_llm(self, span: SpanData) -> LlmReading:
        """A model call: its model, tokens, text and the tool calls it requested."""

    def read_tool(self, span: SpanData) -> ToolReading:
        """A tool call: its name, call id, args, result or error."""

    def read_agent(self, span: SpanData) -> AgentReading:
        """An agent invocation: its prompt and answer (and what its payloads say besides)."""

    def agent_name(self, span: SpanData, *, span_name: bool = True) -> str | None:
        """The agent an agent span ran (its span's name as a last resort, unless ``span_name`` is False)."""

    def llm_first_user(self, span: SpanData) -> str | None:
        """The user's message in a model call's input (the run's prompt when no agent span says it)."""

    def llm_messages(self, span: SpanData) -> list[MessageData] | None:
        """A model call's input messages in the neutral form (for the conversation's history)."""


READERS: dict[str, Reader] = {
    "genai": _genai,
    "harvester": _genai,
    "openinference": _openinference,
    "openllmetry": _openllmetry,
}
