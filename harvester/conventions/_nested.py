"""One tool call traced twice: a tool span nested in a tool span of the same call is one call.

Two tracers can each record the same call, one span inside the other: an MCP client (fastmcp, which
follows the OTel MCP conventions: ``tools/call <tool>``, ``gen_ai.operation.name = execute_tool``,
``gen_ai.tool.name``) inside the framework's tool span, the MCP server's own span inside that when it
exports to the same trace, ``@harvester.tool`` stacked with OpenInference's ``@tracer.tool`` in either
order. Counted twice, every call would look requested once and executed twice, and the inner span,
which often carries no payloads, would make the run read as captured without content.

The same call: the nearest tool span above it (through any spans that are not agents: an MCP
transport's span, a graph node) has the same tool name, or it is an MCP ``tools/call`` span (which
names the server's tool: a prefixed toolset shows the model ``shop_kb_search`` for ``kb_search``), and
their args agree (equal, one missing, or one holding the other's keys with the same values:
OpenInference records defaults the caller left out). A tool that runs a sub-agent is a boundary: that
agent's tool calls are its own.

The outer reading is kept (it is the span the framework paired with the model's request), and what
only the inner one holds fills its gaps: the args, the result, the call id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..spans import SpanData
from ._classify import Roles, ancestors
from ._readings import ToolReading
from ._values import MISSING, Bare

__all__ = ["one_per_call"]


def _agree(a: Any, b: Any) -> bool:
    """Two readings of one call's args: equal, one not captured, or one the other with defaults added."""
    if a is MISSING or b is MISSING or a is None or b is None:
        return True
    if isinstance(a, Bare) or isinstance(b, Bare):
        bare, other = (a, b) if isinstance(a, Bare) else (b, a)
        if isinstance(other, Bare):
            return bool(bare.value == other.value)
        return isinstance(other, dict) and bare.value in other.values()
    if isinstance(a, dict) and isinstance(b, dict):
        small, big = (a, b) if len(a) <= len(b) else (b, a)
        return all(k in big and big[k] == v for k, v in small.items())
    return bool(a == b)


def _mcp_call(span: SpanData) -> bool:
    """An MCP client's (or server's) ``tools/call`` span: it names the server's tool, which the framework
    may show the model under another name (a prefixed or renamed toolset)."""
    return span.attributes.get("mcp.method.name") == "tools/call"


def _outer_call(
    t: ToolReading, by_id: Mapping[str, SpanData], roles: Roles, tools: Mapping[str, ToolReading]
) -> str | None:
    """The span id of the tool span that records the same call as ``t`` around it, if any."""
    for sid in ancestors(t.span, by_id):
        role = roles[sid][1]
        if role == "agent":
            return None
        if role == "tool":
            outer = tools.get(sid)
            named = outer is not None and (outer.name == t.name or _mcp_call(t.span))
            return sid if named and outer is not None and _agree(outer.args, t.args) else None
    return None


def _fill(keep: ToolReading, inner: ToolReading) -> None:
    """``keep`` takes what only ``inner`` recorded of the call."""
    if keep.args is MISSING or (isinstance(keep.args, Bare) and isinstance(inner.args, dict)):
        if inner.args is not MISSING:
            keep.args = inner.args
    if keep.status == "ok" and inner.status == "ok" and keep.result is None and inner.result is not None:
        keep.result = inner.result
        keep.truncated = keep.truncated or inner.truncated
    keep.call_id = keep.call_id or inner.call_id
    keep.hidden = keep.hidden and inner.hidden


def one_per_call(tools: list[ToolReading], by_id: Mapping[str, SpanData], roles: Roles) -> list[ToolReading]:
    """``tools`` (in start order) with every reading nested in another of the same call folded into it."""
    if len(tools) < 2:
        return tools
    by_span = {t.span.span_id: t for t in tools}
    keep: dict[str, ToolReading] = {}  # a folded span's id -> the reading it folded into
    out = []
    for t in tools:  # outer spans start first: the one a nested span folds into is already placed
        outer = _outer_call(t, by_id, roles, by_span)
        if outer is None:
            out.append(t)
            continue
        home = keep.get(outer, by_span[outer])
        _fill(home, t)
        keep[t.span.span_id] = home
    return out
