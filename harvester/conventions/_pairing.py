"""Pairing: which tool span answered which of the model's requests, and what became of the others.

A tool span names its request by call id where the producer records one, else by order and name
(and, for an id-less span, by the args it ran with). A request no span answered is ``blocked``
(requested, never executed), unless it was the answer itself (an output tool, a structured
response). Managed agents (smolagents) and tool outputs that end a run are recognized here too.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson

from ..spans import SpanData
from ._errors import error_of
from ._genai import output_tools as genai_output_tools
from ._readers import READERS
from ._readings import LlmReading, ToolReading
from ._values import MISSING, Bare

__all__ = ["answer_from_tools", "pair", "run_by_sub_agents"]


def _same_args(ran: Any, requested: Any) -> bool:
    """A tool span's input is the request's args (or, for a one-argument tool logged bare, its one value)."""
    if isinstance(ran, Bare):
        return isinstance(requested, dict) and len(requested) == 1 and next(iter(requested.values())) == ran.value
    return ran is not MISSING and ran is not None and ran == requested


class _Request(NamedTuple):
    """A tool call the model requested: its model turn, its place in that turn, and what it named."""

    turn: int
    place: int
    name: str
    call_id: str | None
    args: Any


def _requests(llms: list[LlmReading]) -> list[_Request]:
    return [
        _Request(turn, i, name, rid, args)
        for turn, llm in enumerate(llms)
        for i, (name, rid, args) in enumerate(llm.requests)
    ]


def _request_of(
    t: ToolReading, turn: int, reqs: list[_Request], matched: dict[int, ToolReading], lo: int
) -> int | None:
    """The request a tool span answered (of those from ``lo`` on, up to its turn): by id, else by name
    (and, for an id-less span, by the args it ran with)."""
    hit = fallback = same_id = None
    for k in range(lo, len(reqs)):
        r = reqs[k]
        if r.turn > max(turn, 0):
            break
        if k in matched:
            continue
        if t.call_id is not None and r.call_id == t.call_id:
            if r.name == t.name:
                hit = k
                break
            if same_id is None:  # ids can repeat (a sub-agent numbering its own calls): names decide
                same_id = k
            continue
        if r.name == t.name and t.call_id is None and _same_args(t.args, r.args):
            hit = k
            break
        if r.name == t.name and fallback is None:
            fallback = k
            if r.call_id is None and t.call_id is not None:
                hit = k
                break
    if hit is None:  # an id the model never emitted (or under another name): fall back to the name
        hit = same_id if same_id is not None else fallback
    return hit


def _retry_of(t: ToolReading, turn: int, reqs: list[_Request], matched: dict[int, ToolReading]) -> int | None:
    """Another attempt at a request already answered (LangChain's ToolRetryMiddleware runs the tool
    again; the failed attempts carry no id): the same call, in the order the attempts started."""
    if t.call_id is not None:
        return None
    return next(
        (
            k
            for k in matched
            if reqs[k].name == t.name and reqs[k].turn <= max(turn, 0) and _same_args(t.args, reqs[k].args)
        ),
        None,
    )


def _call_args(args: Any, req_args: Any) -> Any:
    """A tool call's args: the span's object, else the request's (a bare or missing input), else the value
    as ``{"input": ...}``."""
    if args is MISSING or isinstance(args, Bare):
        if isinstance(req_args, dict):
            return req_args
        return {"input": args.value} if args is not MISSING else None
    if not isinstance(args, dict) and args is not None:
        return req_args if isinstance(req_args, dict) else {"input": args}
    return args


_Keyed = list[tuple[tuple[int, int, int], dict[str, Any]]]  # (turn, place in it, start) -> a call


def _answered(
    llms: list[LlmReading], tools: list[ToolReading], reqs: list[_Request]
) -> tuple[dict[int, ToolReading], _Keyed]:
    """The tool spans as calls, each keyed by the request it answered (a span no request names after
    its turn's requests), and which requests were answered."""
    starts = [llm.span.start_ns if type(llm.span.start_ns) is int else 0 for llm in llms]
    matched: dict[int, ToolReading] = {}
    keyed: _Keyed = []
    lo = 0  # requests before this index are all matched
    # Tool spans with an id first: an id-less one (an OpenInference tool that raised has no output to
    # carry it) must not take the request of a sibling that names its own; and among same-name
    # requests an id-less span takes the one whose args it ran with.
    for t in sorted(tools, key=lambda t: t.call_id is None):
        start = t.span.start_ns if type(t.span.start_ns) is int else 0
        turn = bisect_right(starts, start) - 1
        while lo in matched:
            lo += 1
        hit = _request_of(t, turn, reqs, matched, lo)
        again = _retry_of(t, turn, reqs, matched) if hit is None else None
        req_args = MISSING
        if hit is not None:
            matched[hit] = t
            r = reqs[hit]
            key, req_args = (r.turn, r.place, start), r.args
            t.call_id = t.call_id or r.call_id
        elif again is not None:
            r = reqs[again]
            key, req_args = (r.turn, r.place, start), r.args
            t.call_id = r.call_id
        else:
            key = (turn, 1 << 30, start)
        if t.answer_tool:
            continue  # its request is matched, so it is not reported as blocked either
        call = {
            "name": t.name,
            "call_id": t.call_id,
            "args": _call_args(t.args, req_args),
            "status": t.status,
            "result": t.result,
            "error": t.error,
            "truncated": t.truncated,
        }
        keyed.append((key, call))
    return matched, keyed


def _unanswered(
    llms: list[LlmReading], reqs: list[_Request], matched: dict[int, ToolReading], answers: Sequence[Any]
) -> tuple[_Keyed, bool]:
    """The requests no tool span answered, as calls that never ran (but for the answer itself: an
    output tool, a structured response), and whether the run paused on the last turn's."""
    output_tools: dict[int, set[str]] = {}

    def is_output_tool(r: _Request) -> bool:
        if answers and r.args is not MISSING and r.args in answers:
            return True  # LangChain's ToolStrategy: the model "calls" the response schema
        if r.turn not in output_tools:
            output_tools[r.turn] = genai_output_tools(llms[r.turn].span)
        return r.name in output_tools[r.turn]

    last = [k for k, r in enumerate(reqs) if r.turn == len(llms) - 1]
    paused = bool(last) and not any(k in matched for k in last) and any(not is_output_tool(reqs[k]) for k in last)
    keyed: _Keyed = []
    for k, r in enumerate(reqs):
        if k in matched or is_output_tool(r):
            continue
        # The run stopped on the last turn's requests (if it answered anyway, build() makes them
        # denied); an earlier turn's unanswered request was denied.
        status = "awaiting" if paused and r.turn == len(llms) - 1 else "blocked"
        args = r.args if isinstance(r.args, dict) or r.args is None else {"input": r.args}
        call = {
            "name": r.name,
            "call_id": r.call_id,
            "args": args,
            "status": status,
            "result": None,
            "error": None,
            "truncated": False,
        }
        keyed.append(((r.turn, r.place, 0), call))
    return keyed, paused


def pair(
    llms: list[LlmReading], tools: list[ToolReading], answers: Sequence[Any] = ()
) -> tuple[list[dict[str, Any]], bool]:
    """Tool spans matched to the model's requests (by id, else by order and name); unexecuted requests blocked.

    Returns the calls in request order (a tool span no request names follows its turn's requests) and
    whether the last model turn's requests all went unexecuted (the run paused on them). A request
    whose args are one of ``answers`` (the agent's structured response) is the answer, not a call.
    """
    reqs = _requests(llms)
    matched, keyed = _answered(llms, tools, reqs)
    rest, paused = _unanswered(llms, reqs, matched, answers)
    keyed += rest
    keyed.sort(key=lambda kv: kv[0])
    return [c for _, c in keyed], paused


def run_by_sub_agents(calls: list[dict[str, Any]], nested: list[tuple[SpanData, str]]) -> None:
    """A request no tool span answered, but a nested agent of that name did: a managed agent (smolagents
    runs a sub-agent the model "calls" by name as an agent span, not a tool span). Executed, once each."""
    by_name: dict[str, list[tuple[SpanData, str]]] = {}
    for sp, src in nested:
        name = READERS[src].agent_name(sp)
        if name:
            by_name.setdefault(name, []).append((sp, src))
    for call in calls:
        runs = by_name.get(call["name"]) if call["status"] in ("blocked", "awaiting") else None
        if runs:
            sp, src = runs.pop(0)
            answer = READERS[src].read_agent(sp).answer
            call.update(
                status="error" if sp.status == "ERROR" else "ok",
                result=answer if isinstance(answer, str) and sp.status != "ERROR" else None,
                error=error_of(sp) if sp.status == "ERROR" else None,
            )


def answer_from_tools(last: LlmReading | None, calls: list[dict[str, Any]]) -> str | None:
    """A run that ended on its tools' output (openai-agents ``stop_on_first_tool``/``StopAtTools``,
    LangChain ``return_direct``): every call of the last model turn ran ok and no model call followed,
    so the last one's result is the answer. Only for OpenInference/OpenLLMetry, whose agent span ends
    cleanly on it; a GenAI trace cut off after its tools stays ``unknown``."""
    if last is None or not last.requests:
        return None
    ids = {r[1] for r in last.requests}
    mine = [c for c in calls if c["call_id"] in ids]
    if not mine or any(c["status"] != "ok" for c in mine):
        return None
    final = mine[-1]["result"]
    return final if isinstance(final, str) else orjson.dumps(final).decode()
