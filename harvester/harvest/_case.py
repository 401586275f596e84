"""One run to one case: what it did, frozen.

Every executed tool call becomes a fixture (so replay is deterministic), the successful distinct
calls give ``min_steps`` (a floor and a bound), mutating tools the run did not need become
``forbidden_tools``, each harvested check (``checks.HARVESTED``) proposes its own from the recording
(the calls the replay must make, the order around mutating ones), and the failure kind names what
the case protects against. A handoff that only led to a forbidden call is none of these (``_routes``).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable
from typing import Any

from .. import checks as checklib
from ..case import NOTE_PREFIX, AgentCase, Fixture, Recorded, Source
from ..config import Config
from ..conventions import client_scopes, model_hosts
from ..model import ErrorInfo, Run
from ._kinds import ABSTAINED, Reading, read_run
from ._model_fixtures import model_fixtures
from ._routes import routes_note, routes_to_harm
from ._signature import signature_of, slug

__all__ = ["COST_HEADROOM", "NO_HISTORY_NOTE", "build_case", "case_from_run"]

COST_HEADROOM = 2.0  # max_cost = recorded cost x this, so ordinary variance never fails a case
NO_HISTORY_NOTE = (
    NOTE_PREFIX + "the spans do not hold the conversation before this prompt (no model call input was "
    "captured): if it is a later turn of a chat, add the earlier messages as `history`, or replay asks "
    "the agent the turn alone"
)


def case_from_run(
    run: Run,
    *,
    config: Config | None = None,
    why: str | None = None,
    expected: str | None = None,
    required_elements: Iterable[str] = (),
    forbid: Iterable[str] = (),
    tags: Iterable[str] = (),
    incident: bool = False,
) -> AgentCase:
    """Freeze ``run`` into a pending case (id = a slug of the prompt; make it unique with ``CaseFolder``).

    ``incident`` marks the run as one someone reported: its failure kind is at least
    ``negative_feedback`` and the mutating tools it executed (plus ``forbid``) become forbidden.
    """
    config = config or Config()
    forbid = list(forbid)
    reading = read_run(run, config, incident=incident, forbid=forbid)
    return build_case(
        run, reading, config, why=why, expected=expected, required_elements=required_elements, forbid=forbid, tags=tags
    )


def _strict_repeats(fixtures: list[Fixture], forbidden: list[str], config: Config) -> list[str] | bool:
    """The mutating tools the recording called (``mutating_tools``; a forbidden one fails the case
    anyway): a repeat of one beyond its recorded times is a second refund, not a redundant call, so it
    gets ``no_fixture`` (``already_played``) rather than its last recording again. False: none."""
    return (
        list(dict.fromkeys(f.tool for f in fixtures if f.tool not in forbidden and config.is_mutating(f.tool))) or False
    )


def build_case(
    run: Run,
    reading: Reading,
    config: Config,
    *,
    why: str | None = None,
    expected: str | None = None,
    required_elements: Iterable[str] = (),
    forbid: Iterable[str] = (),
    tags: Iterable[str] = (),
) -> AgentCase:
    unintended = set(reading.unintended) | set(forbid)
    routes = routes_to_harm(run, unintended)  # handoffs that only led to harm: not required, not served
    notes: list[str] = [routes_note(run, routes, unintended)] if routes else []
    fixtures: list[Fixture] = []
    ignore_args: dict[str, list[str]] = {}
    needed: set[str] = set()  # tools the run executed for its task (ok or failed)
    distinct_ok: set[str] = set()
    appropriate: list[str] = []
    for i, (call, key) in enumerate(zip(run.calls, reading.keys)):
        if not call.executed or i in routes:  # denied, awaiting a human, or a route to harm: nothing to serve
            continue
        if call.name in config.ignore_args:
            ignore_args[call.name] = config.ignore_args[call.name]
        ok = call.status == "ok"
        fixtures.append(
            Fixture(
                key=key,
                tool=call.name,
                args=call.args,
                result=call.result if ok else None,
                error=None if ok else (call.error or ErrorInfo(type="error")),
                truncated=call.truncated,
            )
        )
        if call.truncated:
            notes.append(
                f"fixture {len(fixtures) - 1} ({key}): the result was truncated by the OTel attribute "
                "length limit; paste the full result (or raise the limit) before accepting"
            )
        if call.name in unintended:
            continue
        needed.add(call.name)
        if ok:
            distinct_ok.add(key)
            if call.name not in appropriate:
                appropriate.append(call.name)
    notes += _payload_notes(run, fixtures)
    notes += _fed_back(run)
    turns, turn_notes = model_fixtures(run)
    notes += turn_notes
    if run.incomplete is not None:
        notes.append(
            f"capture lost spans of this trace ({run.incomplete}): the run may lack model or tool calls;"
            " check it against the app before accepting"
        )
    if not run.prompt:
        notes.append("the prompt was not captured: write it before accepting")
    if run.history is None and run.prompt:
        notes.append(NO_HISTORY_NOTE)

    cost = run.cost if run.cost is not None else config.cost(run.model, run.usage)
    kind = reading.kind
    should_abstain = (reading.abstains and kind is None) or (
        bool(expected) and ABSTAINED(Run(trace_id=run.trace_id, answer=expected))[0]
    )
    stopped = ("deferred",) if run.stop == "deferred" else ()
    deferred = run.stop == "deferred" and not expected
    if deferred:  # the replay must stop the same way: handed over, on the same pending request
        ends: list[dict[str, Any]] = [{"check": "stopped_with", "stop": "deferred"}]
        if run.awaiting_tools():
            ends.append({"check": "awaiting", "tools": run.awaiting_tools()})
    else:
        ends = [{"check": "abstained" if should_abstain else "answered"}]
    forbidden = _forbidden(config, run, needed, reading.unintended, list(forbid))
    trajectory = run.trajectory()
    recording = checklib.Recording(fixtures, trajectory, forbidden, ignore_args)
    proposed: dict[str, Any] = {"checks": ends}
    for check in checklib.HARVESTED:
        proposed.update(checklib.placed(check, proposed, check.propose(recording, config)))
    return AgentCase(
        id=slug(run.prompt, fallback=f"run-{run.trace_id[:8]}"),
        status="pending",
        why=why or _default_why(run, kind, reading.detail),
        prompt=run.prompt or "",
        history=run.history or [],
        expected=expected,
        judges=[config.default_judge] if expected and config.default_judge else [],
        required_elements=list(dict.fromkeys(required_elements)),
        min_steps=len(distinct_ok),
        appropriate_tools=appropriate,
        forbidden_tools=forbidden,
        max_cost=_with_headroom(cost),
        **proposed,
        tags=list(dict.fromkeys([*(("regression", kind) if kind else ("typical",)), *stopped, *tags])),
        ignore_args=ignore_args,
        strict_repeats=_strict_repeats(fixtures, forbidden, config),
        fixtures=fixtures,
        model_fixtures=turns,
        review_notes=notes,
        recorded=Recorded(
            trajectory=trajectory,
            denied=_denied(run),
            awaiting=run.awaiting_tools(),
            stop=run.stop,
            answer=run.answer,
            steps=run.steps,
            cost=cost,
            model_hosts=model_hosts([run]),
            mcp_tools=run.mcp_tools,
            instrumentation=client_scopes(run.instrumentation, {llm.provider for llm in run.llm_calls}),
        ),
        source=Source(
            trace_id=run.trace_id,
            run_id=run.run_id,
            captured_at=run.started_at,
            last_seen=run.started_at,
            agent=run.agent,
            failure_kind=kind,
            seen=1,
            signature=signature_of(run, kind),
            incident=reading.incident,
        ),
    )


def _payload_notes(run: Run, fixtures: list[Fixture]) -> list[str]:
    """What a reviewer must fill in: every payload, when no call holds any (content capture was off), else
    the args of each call whose args alone are missing (one tracer's span of it without them)."""
    whole = [f for f in fixtures if f.args is not None and (f.result is not None or f.error is not None)]
    if not whole and (not run.content_captured or any(f.args is None for f in fixtures)):
        return [
            "payloads were not captured (content capture off): the fixtures are incomplete; fill in "
            "args and results, or re-capture with content on, before accepting"
        ]
    return [
        f"fixture {i} ({f.key}): its args were not captured; fill them in before accepting"
        for i, f in enumerate(fixtures)
        if f.args is None
    ]


def _fed_back(run: Run) -> list[str]:
    """A run whose every call reads as denied (requested, no tool span ran it), each one's result given to
    a later model call: a loop that runs its tools on a thread pool without the trace context leaves
    their spans in traces of their own, and reads so. The case would forbid the tools the agent needs,
    so the reviewer decides. (A guardrail that denies one call among executed ones tells the model so
    too, and is not this.)"""
    if any(c.status in ("ok", "error") for c in run.calls):
        return []
    denied = {c.call_id: c.name for c in run.calls if c.status == "blocked" and c.call_id}
    fed = {
        denied[m.tool_call_id]
        for llm in run.llm_calls
        if llm.request is not None
        for m in llm.request.messages
        if m.role == "tool" and m.tool_call_id in denied and m.content
    }
    if not fed or len(fed) < len(set(denied.values())):
        return []
    return [
        f"{', '.join(sorted(fed))}: requested, and a later model call was given a result each time, but no"
        " tool span of this trace ran one, so the case forbids them as denied. If they ran (tools on a thread"
        " pool lose the trace context: see docs/own-loop.md), carry the context and re-harvest; if they were"
        " denied (a guardrail, a human), delete this note before accepting"
    ]


def _denied(run: Run) -> list[str]:
    return list(dict.fromkeys(c.name for c in run.calls if c.status == "blocked"))


def _forbidden(config: Config, run: Run, needed: set[str], unintended: list[str], forbid: list[str]) -> list[str]:
    """Mutating tools the run did not need, tools it was denied, the ones an incident should not have
    run, and ``--forbid``. A request denied in production is a line a replay must not cross.

    ``never_used`` compares exact names, so a glob pattern is expanded to the tools this run requested.
    """
    out: list[str] = []
    for pattern in config.mutating_tools:
        if any(ch in pattern for ch in "*?["):
            out.extend(t for t in run.requested_tools() if fnmatch.fnmatchcase(t, pattern) and t not in needed)
        elif pattern not in needed:
            out.append(pattern)
    denied = [t for t in _denied(run) if t not in needed]
    return list(dict.fromkeys([*out, *denied, *unintended, *forbid]))


def _with_headroom(cost: float | None) -> float | None:
    """Recorded cost x ``COST_HEADROOM``, rounded up to two significant digits (0.0042 -> 0.0084)."""
    if not cost or cost <= 0:
        return None
    limit = cost * COST_HEADROOM
    quantum = 10.0 ** (math.floor(math.log10(limit)) - 1)
    return float(f"{math.ceil(limit / quantum - 1e-9) * quantum:.12g}")


def _default_why(run: Run, kind: str | None, detail: str) -> str:
    if kind:
        return f"{kind}: {detail}"
    path = " -> ".join(run.trajectory()) or "no tools"
    if run.stop == "deferred":
        pending = ", ".join(run.awaiting_tools())
        waits = f"waiting for approval of {pending}" if pending else "handed to a human"
        return f"deferred {run.agent or 'agent'} run ({path}): {waits}"
    return f"typical {run.agent or 'agent'} run ({path})"
