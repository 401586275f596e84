"""A trace's spans to its runs: which spans are runs, and each run built from its subtree.

One run per OUTERMOST agent span of a trace: agent spans nested inside it (openai-agents, OpenLLMetry's
``invoke_agent`` > ``<name>.workflow``, a sub-agent) fold into the same run. A trace without an agent span
yields no run: without the invocation root there is no run boundary, no prompt and no stop to trust.
Spans come as whatever was given (SDK spans, OTLP/JSON, ``SpanData``), any mix of traces.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ..model import RunData
from ..spans import SpanData, from_readable, span_from_otlp, spans_from_otlp
from ._assembly import build
from ._classify import INCOMPLETE_KEY, classify, promote_chains, subtree
from ._frameworks import agent_calls
from ._readers import READERS

__all__ = ["agent_names", "run_data_from_spans", "span_datas"]

log = logging.getLogger("harvester.conventions")


def span_datas(spans: Any) -> Iterable[SpanData]:
    """``SpanData`` from whatever was given: SDK spans, OTLP/JSON span objects or documents, SpanData dicts."""
    if isinstance(spans, dict):
        spans = [spans]
    for s in spans:
        if isinstance(s, SpanData):
            yield s
        elif isinstance(s, dict):
            if "resourceSpans" in s:
                try:
                    yield from spans_from_otlp(s)
                except Exception:
                    log.debug("skipped a malformed OTLP/JSON document", exc_info=True)
            elif "traceId" in s:
                try:
                    yield span_from_otlp(s)
                except (KeyError, ValueError, TypeError, AttributeError):
                    continue
            elif "trace_id" in s and "span_id" in s:
                try:
                    yield SpanData.from_dict(s)
                except TypeError:
                    continue
        elif hasattr(s, "context") and hasattr(s, "attributes"):
            yield from_readable(s)


def agent_names(spans: Any) -> set[str]:
    """Names of the agents these spans ran, and of the handoffs to them: calls a framework answers by
    running an agent (a smolagents managed agent, an openai-agents handoff), never by running a tool."""
    names = []
    for sp in span_datas(spans):
        source, role = classify(sp)
        if role == "agent":
            names.append(READERS[source].agent_name(sp))
    return agent_calls(n for n in names if n)


def run_data_from_spans(spans: Any) -> list[RunData]:
    """``runs_from_spans`` in the Run's JSON form (``RunData``, without the derived lists).

    Capture and ingest store this form as it is: it is built field by field from checked types, so
    validating it into a ``Run`` (a third of the cost of reading a run) would change nothing.
    """
    traces: dict[str, dict[str, SpanData]] = {}
    for sp in span_datas(spans):
        if not isinstance(sp.attributes, dict):
            sp.attributes = {}
        traces.setdefault(sp.trace_id, {})[sp.span_id] = sp
    runs: list[RunData] = []
    for by_id in traces.values():
        roles = {sid: classify(sp) for sid, sp in by_id.items()}
        promote_chains(by_id, roles)
        if not any(r[1] == "agent" for r in roles.values()):
            continue
        children: dict[str | None, list[SpanData]] = {}
        for sp in by_id.values():
            children.setdefault(sp.parent_id if sp.parent_id in by_id else None, []).append(sp)
        roots: list[SpanData] = []
        lost = _lost(by_id)
        stack = [(sp, False) for sp in children.get(None, ())]
        while stack:  # find outermost agent spans; nothing under one is a root
            sp, inside = stack.pop()
            is_agent = roles[sp.span_id][1] == "agent"
            if is_agent and not inside:
                roots.append(sp)
            stack.extend((c, inside or is_agent) for c in children.get(sp.span_id, ()))
        for root in sorted(roots, key=lambda s: s.start_ns if type(s.start_ns) is int else 0):
            members = subtree(root, children, set())
            members.sort(key=lambda s: s.start_ns if type(s.start_ns) is int else 0)
            try:
                run = build(root, roles[root.span_id][0], members, roles)
            except Exception:
                log.warning("could not read run %s/%s", root.trace_id, root.span_id, exc_info=True)
                run = _unreadable(root, roles[root.span_id][0])
            if lost is not None:
                run["incomplete"] = lost
            runs.append(run)
    return runs


def _lost(by_id: dict[str, SpanData]) -> str | None:
    """The reason capture marked the trace as having lost spans (``INCOMPLETE_KEY`` on any of its spans)."""
    for sp in by_id.values():
        reason = sp.attributes.get(INCOMPLETE_KEY)
        if reason is not None:
            return str(reason)
    return None


def _unreadable(root: SpanData, source: str) -> RunData:
    """The Run of a run that could not be read: its ids, nothing else claimed."""
    return {
        "trace_id": root.trace_id,
        "run_id": root.span_id,
        "agent": None,
        "model": None,
        "prompt": None,
        "answer": None,
        "stop": "unknown",
        "error": None,
        "calls": [],
        "llm_calls": [],
        "usage": {"input_tokens": None, "output_tokens": None},
        "cost": None,
        "started_at": None,
        "duration_ms": None,
        "content_captured": False,
        "feedback": None,
        "source": source,
    }
