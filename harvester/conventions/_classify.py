"""Which convention a span speaks and what it is: an agent invocation, a model call, a tool call, or
something else (a graph node, an HTTP request), and which spans root a run.

A span of no known convention is ``("", "other")``: ignored, never an error.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..spans import SpanData
from ._values import placeholder

__all__ = [
    "GENAI_OP",
    "INCOMPLETE_KEY",
    "LLM_OPS",
    "OI_KIND",
    "Roles",
    "TL_KIND",
    "ancestors",
    "classify",
    "is_agent_span",
    "may_hold_run",
    "promote_chains",
    "subtree",
]

OI_KIND = "openinference.span.kind"
TL_KIND = "traceloop.span.kind"
GENAI_OP = "gen_ai.operation.name"
# The attribute capture sets on one span of a trace it dropped spans of: every run read from the trace
# is marked ``incomplete`` with its value (the first drop's reason). It travels with the stored spans,
# so a trace normalized later (the store's inbox, ``ingest`` of an export) is marked all the same.
INCOMPLETE_KEY = "harvester.incomplete"
LLM_OPS = frozenset({"chat", "text_completion", "generate_content", "completion", "responses"})
_OI_ROLES = {"AGENT": "agent", "LLM": "llm", "TOOL": "tool"}
_TL_ROLES = {"workflow": "agent", "agent": "agent", "tool": "tool"}
Roles = dict[str, tuple[str, str]]  # span id -> (source, role)


def is_agent_span(span: Any) -> bool:
    """True for an agent invocation root; the capture processor calls it on every span ending."""
    a = span.attributes
    if not a:
        return False
    kind = a.get(OI_KIND)
    if kind is not None:
        return kind == "AGENT"
    kind = a.get(TL_KIND)
    if kind is not None:
        return kind == "workflow" or kind == "agent"
    return a.get(GENAI_OP) == "invoke_agent"


def may_hold_run(span: Any) -> bool:
    """True for a span whose trace may hold a run: an agent span, or an OpenInference CHAIN.

    OpenInference's LangChain instrumentor marks a graph AGENT only when its name contains "agent":
    ``create_agent(model, tools)`` is a CHAIN named "LangGraph". Such a chain becomes the run's root
    when it is the outermost OpenInference span and a model call runs under it (``promote_chains``).
    """
    if is_agent_span(span):
        return True
    a = span.attributes
    return bool(a) and a.get(OI_KIND) == "CHAIN"


def promote_chains(by_id: Mapping[str, SpanData], roles: dict[str, tuple[str, str]]) -> None:
    """Make the outermost OpenInference CHAIN above an agent's work the agent root (see ``may_hold_run``).

    Only a chain with no OpenInference span above it (nested chains are graph nodes; a LangGraph
    ReAct agent's model node is even named "agent"), with no AGENT span between it and the work (a
    named agent inside an outer graph stays its own run), and only over an agent's work: a model call
    AND a tool span or a requested tool call. A plain chain (prompt | llm | parser) is no agent run.
    The model call may come from another convention's instrumentor (a raw SDK loop whose app traces
    its loop and tools with OpenInference, its client with OpenLLMetry).
    """
    model: set[str] = set()
    tools: set[str] = set()
    for sid, (source, role) in roles.items():
        if role not in ("llm", "tool") or (role == "tool" and source != "openinference"):
            continue
        top = _chain_top(sid, by_id, roles)
        if top is None:
            continue
        if role == "tool":
            tools.add(top)
        else:
            model.add(top)
            if _requests_tools(by_id[sid].attributes):
                tools.add(top)
    for sid in model & tools:
        roles[sid] = ("openinference", "agent")


def _requests_tools(a: Mapping[str, Any]) -> bool:
    """A model call's output asks for tools (OpenInference's flattened keys, or GenAI output messages)."""
    out = a.get("gen_ai.output.messages")
    return any(".tool_calls." in k for k in a) or (type(out) is str and '"tool_call"' in out)


def ancestors(span: SpanData, by_id: Mapping[str, SpanData]) -> Iterator[str]:
    """The ids of the spans above ``span`` that ``by_id`` holds, nearest first (bounded: ids can loop)."""
    parent, hops = span.parent_id, 0
    while parent is not None and parent in by_id and hops < 10_000:
        yield parent
        parent, hops = by_id[parent].parent_id, hops + 1


def subtree(root: SpanData, children: Mapping[str | None, Sequence[SpanData]], taken: set[str]) -> list[SpanData]:
    """``root`` and its descendants, skipping (and adding to ``taken``) span ids already taken."""
    out: list[SpanData] = []
    todo = [root]
    while todo:
        sp = todo.pop()
        if sp.span_id in taken:
            continue
        taken.add(sp.span_id)
        out.append(sp)
        todo.extend(children.get(sp.span_id, ()))
    return out


def _chain_top(sid: str, by_id: Mapping[str, SpanData], roles: Mapping[str, tuple[str, str]]) -> str | None:
    """The outermost OpenInference span above ``sid`` if it is a CHAIN and no agent span is in between."""
    top = None
    for parent in ancestors(by_id[sid], by_id):
        source, role = roles[parent]
        if source != "openinference":
            break
        if role == "agent":
            return None
        top = parent
    if top is not None and roles[top][1] == "other" and by_id[top].attributes.get(OI_KIND) == "CHAIN":
        return top
    return None


def classify(span: SpanData) -> tuple[str, str]:
    """(source, role): role is agent | llm | tool | other; source is "" for a span of no known convention."""
    a = span.attributes
    kind = a.get(OI_KIND)
    if kind is not None:
        role = _OI_ROLES.get(kind, "other") if type(kind) is str else "other"
        return "openinference", "other" if role == "llm" and not _oi_model_call(a) else role
    scope = span.scope if type(span.scope) is str else ""
    kind = a.get(TL_KIND)
    op = a.get(GENAI_OP)
    traceloop = kind is not None or "traceloop.workflow.name" in a or scope.startswith("opentelemetry.instrumentation.")
    if type(kind) is str and kind in _TL_ROLES:
        return "openllmetry", _TL_ROLES[kind]
    if type(op) is str:
        source = "openllmetry" if traceloop else ("harvester" if scope.startswith("harvester") else "genai")
        if op == "invoke_agent":
            return source, "agent"
        if op == "execute_tool":
            return source, "tool"
        if op in LLM_OPS:
            return source, "llm"
        return source, "other"
    if traceloop:
        return "openllmetry", "llm" if a.get("llm.request.type") == "chat" else "other"
    return "", "other"


# What only a model call of the conversation records on an OpenInference LLM span.
_OI_CALL_KEYS = ("llm.model_name", "llm.token_count.", "llm.input_messages.", "llm.output_messages.", "llm.prompts")


def _oi_model_call(a: Mapping[str, Any]) -> bool:
    """False for an OpenInference LLM span that is no chat or completion call: OpenInference's OpenAI
    instrumentor traces every request the client makes as one (a moderation, a bare ``client.post``),
    with its payloads but no model, tokens or messages. Such a span is no turn of the run: counted, it
    read as a model call whose content capture was off and hid the conversation after it. A span with
    its payloads hidden too says nothing either way and stays a model call (content capture off)."""
    if "llm.model_name" in a or any(k.startswith(_OI_CALL_KEYS) for k in a):
        return True
    said = [a[k] for k in ("input.value", "output.value") if type(a.get(k)) is str]
    return not said or all(placeholder(v) for v in said)
