"""One run from its root and its spans: read them with their convention's reader, decide.

``build`` goes in steps: read the members (``_members``), gather what the agent spans say
(``_agent_facts``), pair tool calls with requests (``_pairing``), then decide the answer and the stop
(``_decide``) and count the tokens (``_usage``). The result is the Run's JSON form, every field in
model order: valid by construction, so capture and ingest store it without validating a model.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from ..model import STOPS, McpToolData, MessageData, RunData
from ..spans import SpanData
from ._classify import Roles, ancestors
from ._errors import LIMIT_ANSWERS, LIMIT_STOPS, RUN_STOPPERS, deferral, error_of
from ._frameworks import HIDDEN_ANSWERS, forced_answer, not_a_call
from ._genai import mcp_tools
from ._history import genai_messages, split_history
from ._nested import one_per_call
from ._pairing import answer_from_tools, pair, run_by_sub_agents
from ._readers import READERS
from ._readings import LlmReading, ToolReading
from ._values import MISSING, Bare, count, iso, text, total

__all__ = ["FEEDBACK_KEYS", "build"]

log = logging.getLogger("harvester.conventions")
# Attributes an app (or `harvester incident`) sets on any span of a run to flag it.
FEEDBACK_KEYS = ("harvester.feedback", "user.feedback", "feedback")
NEGATIVE = frozenset({"negative", "thumbs_down", "thumbs-down", "down", "bad", "-1", "false"})
POSITIVE = frozenset({"positive", "thumbs_up", "thumbs-up", "up", "good", "1", "true"})
STOP_KEY = "harvester.stop"


@dataclass(slots=True)
class _Members:
    """A run's spans as read: its agent spans (outermost first), model calls and tool calls."""

    agents: list[tuple[SpanData, str]] = field(default_factory=list)
    llms: list[LlmReading] = field(default_factory=list)
    tools: list[ToolReading] = field(default_factory=list)
    interrupted: bool = False  # a span says the run paused for a human


@dataclass(slots=True)
class _AgentFacts:
    """What the agent spans say about the run."""

    agent: str | None = None
    model: str | None = None
    prompt: Any = MISSING
    answer: Any = MISSING
    history_user: str | None = None
    deferred: bool = False
    error: dict[str, str] | None = None
    structured: list[Any] = field(default_factory=list)


def _nearest_agent(span: SpanData, by_id: Mapping[str, SpanData], roles: Roles) -> str | None:
    """The id of the closest agent span above ``span`` (a sub-agent's tools are not the run's own)."""
    return next((a for a in ancestors(span, by_id) if roles[a][1] == "agent"), None)


def _nested_llm_spans(by_id: Mapping[str, SpanData], roles: Roles) -> set[str]:
    """Model-call spans inside another model-call span: the same call, traced twice.

    pydantic-ai's chat span wraps the OpenAI SDK call, which an OpenAI instrumentor (OpenInference's,
    or OpenLLMetry's, which ``Traceloop.init()`` turns on) traces again; counting both would double the
    tokens and report the inner span's requests as never executed. The outer, framework span is kept.
    Inside is by time too: the anthropic SDK (2.x) traces its own calls (no content), and an
    instrumentor that does not make its span current (OpenLLMetry's; any on a stream) leaves that span
    beside its own, within its time, under the same parent, in another instrumentation scope.
    """
    llm = {sid: sp for sid, sp in by_id.items() if roles[sid][1] == "llm"}
    if len(llm) < 2:
        return set()
    inner = {sid for sid, sp in llm.items() if any(a in llm for a in ancestors(sp, by_id))}
    siblings: dict[str | None, list[SpanData]] = {}
    for sid, sp in llm.items():
        if sid not in inner and type(sp.start_ns) is int and type(sp.end_ns) is int:
            siblings.setdefault(sp.parent_id, []).append(sp)
    for group in siblings.values():
        outer: SpanData | None = None  # of the spans started so far, the one that ends last
        for sp in sorted(group, key=lambda s: (s.start_ns, -s.end_ns)):
            if outer is not None and sp.end_ns <= outer.end_ns and sp.scope != outer.scope:
                inner.add(sp.span_id)
            elif outer is None or sp.end_ns > outer.end_ns:
                outer = sp
    return inner


def _members(members: list[SpanData], by_id: Mapping[str, SpanData], roles: Roles) -> _Members:
    out = _Members()
    nested = _nested_llm_spans(by_id, roles)
    for sp in members:
        src, role = roles[sp.span_id]
        if sp.span_id in nested:
            continue
        if role == "agent":
            out.agents.append((sp, src))
        elif role == "llm":
            out.llms.append(READERS[src].read_llm(sp))
        elif role == "tool" and not not_a_call(sp):  # a framework's summary of its calls is none of them
            out.tools.append(READERS[src].read_tool(sp))
        if sp.events and role != "tool" and deferral(sp):
            out.interrupted = True
    out.tools = one_per_call(out.tools, by_id, roles)
    last_llm = max((llm.span.start_ns for llm in out.llms if type(llm.span.start_ns) is int), default=0)
    for t in out.tools:  # no model turn after it: the run stopped on it (openai-agents needs_approval)
        if t.awaiting and type(t.span.start_ns) is int and t.span.start_ns > last_llm:
            t.status = "awaiting"
            out.interrupted = True
    return out


def _agent_facts(agents: list[tuple[SpanData, str]], tools: list[ToolReading]) -> _AgentFacts:
    out = _AgentFacts()
    for sp, src in agents:  # outermost first: members are in start order
        reader = READERS[src]
        out.agent = out.agent or reader.agent_name(sp, span_name=False)
        out.model = (
            out.model or text(sp.attributes.get("model_name")) or text(sp.attributes.get("gen_ai.request.model"))
        )
        io = reader.read_agent(sp)
        if io.structured is not MISSING:
            out.structured.append(io.structured)
        for t in tools:  # a bare input (a one-argument tool) whose request is in an earlier trace
            if isinstance(t.args, Bare) and t.call_id in io.requested:
                requested = io.requested[t.call_id]
                # the value it ran with (a human may have edited it), under the argument's name
                t.args = {next(iter(requested)): t.args.value} if len(requested) == 1 else requested
        if out.prompt is MISSING or out.prompt is None:
            out.prompt = io.prompt if io.prompt is not MISSING else out.prompt
        if out.answer is MISSING:
            out.answer = io.answer
        out.history_user = out.history_user or io.history_user
        out.deferred = out.deferred or io.deferred
        if out.error is None and sp.status == "ERROR" and not deferral(sp):
            out.error = error_of(sp)
    return out


def _decide(
    root: SpanData,
    source: str,
    m: _Members,
    facts: _AgentFacts,
    own: list[ToolReading],
    calls: list[dict[str, Any]],
    paused: bool,
    roles: Roles,
) -> tuple[Any, Any, str]:
    """The run's prompt, answer and stop, from what every span said; ``facts.error`` may be set here."""
    llms, prompt, answer, error = m.llms, facts.prompt, facts.answer, facts.error
    if prompt is MISSING:
        prompt = None
    if not prompt and llms:
        prompt = READERS[roles[llms[0].span.span_id][0]].llm_first_user(llms[0].span)
    if not prompt:
        prompt = facts.history_user
    last = llms[-1] if llms else None
    deferred = facts.deferred or m.interrupted
    if answer is MISSING or (answer is None and not deferred and last is not None and not last.requests):
        answer = last.text if last is not None and not last.requests else None
    if answer == "" or (error is not None and error["type"] in HIDDEN_ANSWERS):
        answer = None  # an output guardrail blocked it: nobody saw that text
    if answer is None and error is None and not deferred and not paused and source in ("openinference", "openllmetry"):
        answer = answer_from_tools(last, calls)
    if error is None and (
        forced_answer(m.agents, llms, own) or (isinstance(answer, str) and answer.startswith(LIMIT_ANSWERS))
    ):
        stop = "max_steps"
    elif error is not None:
        stop = LIMIT_STOPS.get(error["type"], "error")
    elif deferred or (paused and answer is None):
        stop = "deferred"
    elif answer is not None or (last is not None and not last.requests):
        stop = "answered"
    else:
        stop = "unknown"
    declared = root.attributes.get(STOP_KEY)  # an app's own explicit stop (``AgentRun.stop``) wins
    if isinstance(declared, str) and declared in STOPS:
        stop = declared
        if error is None and stop not in ("answered", "deferred") and root.attributes.get(STOP_KEY + "_message"):
            facts.error = {"type": stop, "message": text(root.attributes[STOP_KEY + "_message"]) or ""}
    return prompt, answer, stop


def _usage(llms: list[LlmReading], root: SpanData) -> dict[str, int | None]:
    if llms:
        return {
            "input_tokens": total(llm.input_tokens for llm in llms),
            "output_tokens": total(llm.output_tokens for llm in llms),
        }
    ra = root.attributes  # no per-call spans: the agent's own aggregate is all there is (never added to them)
    return {
        "input_tokens": count(
            ra.get(
                "gen_ai.aggregated_usage.input_tokens",
                ra.get("gen_ai.usage.input_tokens", ra.get("llm.token_count.prompt")),
            )
        ),
        "output_tokens": count(
            ra.get(
                "gen_ai.aggregated_usage.output_tokens",
                ra.get("gen_ai.usage.output_tokens", ra.get("llm.token_count.completion")),
            )
        ),
    }


def _history(llms: list[LlmReading], roles: Roles, root: SpanData) -> list[MessageData] | None:
    """The conversation before the turn, from its first model call's input (``_history``), else from
    the agent span's (``harvester.agent_run(history=...)`` records it there)."""
    found = None
    if llms:
        first = llms[0].span
        found = split_history(READERS[roles[first.span_id][0]].llm_messages(first))
    if found is None and "gen_ai.input.messages" in root.attributes:
        found = split_history(genai_messages(root.attributes))
    return found


def _agents(own: str | None, agents: list[tuple[SpanData, str]]) -> list[str]:
    """The run's own agent, then the agents nested in it (a handoff's target, a managed agent), once each.
    The outermost span is the run's own: openai-agents names it after the workflow, not an agent."""
    names = [own, *(READERS[src].agent_name(sp) for sp, src in agents[1:])]
    return list(dict.fromkeys(n for n in names if n))


def _mcp_tools(llms: list[LlmReading]) -> list[McpToolData]:
    """The MCP servers' tools the model calls were offered, each once (the first listing of it)."""
    seen: dict[tuple[str | None, str], McpToolData] = {}
    for llm in llms:
        for t in mcp_tools(llm.span):
            seen.setdefault((t["toolset"], t["name"]), t)
    return list(seen.values())


def _feedback(spans: Iterable[SpanData]) -> str | None:
    found = None
    for sp in spans:
        a = sp.attributes
        for key in FEEDBACK_KEYS:
            if key in a:
                v = a[key]
                if isinstance(v, bool):
                    v = "true" if v else "false"
                elif isinstance(v, (int, float)):
                    v = "-1" if v < 0 else ("1" if v > 0 else "0")
                v = (text(v) or "").strip().lower()
                if v in NEGATIVE:
                    return "negative"  # one negative signal flags the run
                if v in POSITIVE:
                    found = "positive"
    return found


def build(root: SpanData, source: str, members: list[SpanData], roles: Roles) -> RunData:
    """The Run (JSON form) rooted at ``root``, read from ``members`` (its subtree, in start order)."""
    by_id = {sp.span_id: sp for sp in members}
    m = _members(members, by_id, roles)
    facts = _agent_facts(m.agents, m.tools)
    own = [t for t in m.tools if t.answer_tool and _nearest_agent(t.span, by_id, roles) == root.span_id]
    final = next((t for t in reversed(own) if t.status == "ok" and t.name == "final_answer"), None)
    if final is not None and final.result is not None:  # an answer tool (smolagents'): what it was given
        facts.answer = final.result if isinstance(final.result, str) else orjson.dumps(final.result).decode()
    calls, paused = pair(m.llms, m.tools, facts.structured)
    if len(m.agents) > 1 and any(c["status"] in ("blocked", "awaiting") for c in calls):
        run_by_sub_agents(calls, m.agents[1:])
    if facts.error is None and not (isinstance(facts.answer, str) and facts.answer):
        # A stop recorded on another span (openai-agents' input guardrail fails its turn, a CHAIN). Only
        # a message that names such a stop: a node that failed while the agent recovered is no error.
        failed = next(
            (
                sp
                for sp in members
                if sp.status == "ERROR"
                and roles[sp.span_id][1] == "other"
                and (sp.status_message or "").startswith(RUN_STOPPERS)
            ),
            None,
        )
        if failed is not None:
            facts.error = error_of(failed)
    agent = facts.agent
    if agent is None and m.agents:  # no agent span names the agent: the outermost span's name
        sp, src = m.agents[0]
        agent = READERS[src].agent_name(sp)
    # the model that answered: a call that failed (LangChain's ModelFallbackMiddleware tried the
    # primary first) did not, unless every call failed
    first_model = next(
        (llm.model for llm in m.llms if llm.model and llm.span.status != "ERROR"),
        next((llm.model for llm in m.llms if llm.model), None),
    )
    model = first_model or facts.model
    prompt, answer, stop = _decide(root, source, m, facts, own, calls, paused, roles)
    if stop != "deferred":  # the run went on without them: requests it did not wait for were denied
        for call in calls:
            if call["status"] == "awaiting":
                call["status"] = "blocked"
    hidden = (
        any(t.hidden for t in m.tools)
        or any(llm.hidden for llm in m.llms)
        or not prompt
        or (stop == "answered" and answer is None)
    )
    start, end = root.start_ns, root.end_ns
    ok_times = type(start) is int and type(end) is int and 0 < start <= end
    offered = _mcp_tools(m.llms)
    return cast(
        RunData,
        {  # the readers' dicts are built to RunData's shape
            "trace_id": root.trace_id,
            "run_id": root.span_id,
            "agent": agent,
            "model": model,
            "prompt": prompt if isinstance(prompt, str) and prompt else None,
            "answer": answer if isinstance(answer, str) else None,
            "stop": stop,
            "error": facts.error,
            "calls": calls,
            "llm_calls": [
                {
                    "model": llm.model,
                    "usage": {"input_tokens": llm.input_tokens, "output_tokens": llm.output_tokens},
                    "requests": [{"name": n, "call_id": i, "args": a} for n, i, a in llm.requests],
                    "finish_reason": llm.finish,
                    "server": llm.server,
                    "provider": llm.provider,
                    "request": llm.request,
                    "text": llm.text,
                    "streamed": llm.streamed,
                    "truncated": llm.truncated,
                }
                for llm in m.llms
            ],
            "usage": _usage(m.llms, root),
            "cost": None,
            "started_at": iso(start),
            "duration_ms": round((end - start) / 1e6, 3) if ok_times else None,
            "content_captured": not hidden,
            "feedback": _feedback(members),
            "source": source,
            "history": _history(m.llms, roles, root),
            "agents": _agents(agent, m.agents),
            **({"mcp_tools": offered} if offered else {}),
            "instrumentation": sorted(
                {sp.scope for sp in members if type(sp.scope) is str and sp.scope and roles[sp.span_id][1] == "llm"}
            ),
        },
    )
