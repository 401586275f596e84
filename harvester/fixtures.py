"""The replay executor: recorded tool results in place of live tools, injected failures, and a diagnosis
for every call the recording cannot answer.

``FixtureTools`` never calls a live tool. A call it cannot serve gets a structured ``no_fixture``
*result* rather than an exception, because an agent handed an exception usually stops, while an agent
handed a result keeps going and the report can show the whole divergent path. Like vcrpy's
"can't overwrite existing cassette" message, the result says why nothing matched, which recorded calls
came closest and what differs, and how to fix it (``harvester rerecord``, or the exact ``ignore_args`` entry).

Failures are raised as ``ToolFailure``. A recorded failure whose type can be named here (a builtin such
as ``TimeoutError`` or ``KeyError``, pydantic-ai's ``ModelRetry``, LangChain's ``ToolException``) is
raised as a ``ToolFailure`` that is also an instance of that type, so the agent's own ``except`` clauses
and its framework's retry handling see what they saw in production.
"""

from __future__ import annotations

import builtins
import re
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, cast

import orjson

from . import seam
from .canonical import canonical_json, drop_paths, fixture_key, leaves
from .case import AgentCase, Fixture, InjectSpec
from .errors import NoFixture, ToolFailure
from .redact import PLACEHOLDER, Redactor

__all__ = [
    "HUGE_RESULTS",
    "MAX_CLOSEST",
    "MODES",
    "ClosestCall",
    "FixtureTools",
    "NoFixtureReason",
    "NoFixtureResult",
    "ToolLog",
    "tool_failure",
]

MODES: tuple[str, ...] = ("timeout", "not_found", "rate_limit", "permission", "empty", "malformed", "huge")
HUGE_RESULTS = 50_000
MAX_CLOSEST = 3

# Error modes: what a real API would say. The type is what the model (and the report) sees.
_FAILURES: dict[str, tuple[str, str]] = {
    "timeout": ("TimeoutError", "{tool}: upstream did not answer within 30s (timed out)"),
    "not_found": ("NotFound", "{tool}: 404 Not Found: no such resource"),
    "rate_limit": ("RateLimited", "{tool}: 429 Too Many Requests: rate limit exceeded, retry after 60s"),
    "permission": ("PermissionDenied", "{tool}: 403 Forbidden: the caller lacks permission for this resource"),
}
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")  # a TOML key that needs no quotes
_MALFORMED = '{"results": [{"id": 1, "title": "Refund pol<html><body>502 Bad Gat'


# Recorded type names (as the conventions readers shorten them) -> (module, class) to raise as, when the
# agent's process has that module loaded: a framework's own retry signal must stay one in replay.
_FRAMEWORK_TYPES = {
    "ModelRetry": ("pydantic_ai", "ModelRetry"),
    "ToolRetryError": ("pydantic_ai", "ModelRetry"),
    "ToolException": ("langchain_core.tools", "ToolException"),
}
_NAMED: dict[str, type[ToolFailure]] = {}  # recorded type names without a class to stand for
_TYPED: dict[type, type] = {}


def _rebuilt(self: ToolFailure) -> tuple[Any, tuple[str, str]]:
    """How a failure of a class made here pickles (no name finds its class): made by ``tool_failure``."""
    return tool_failure, (self.type, self.message)


def _named(type_name: str) -> type[ToolFailure]:
    """A ``ToolFailure`` class by the recorded type's name (``ToolTimeout``), so ``type(exc).__name__``
    reads as it did in production; ``ToolFailure`` itself for a name that is not an identifier."""
    if not type_name.isidentifier():
        return ToolFailure
    named = _NAMED.get(type_name)  # one class per name the cases recorded
    if named is None:
        named = _NAMED[type_name] = builtins.type(
            type_name, (ToolFailure,), {"__module__": __name__, "__reduce__": _rebuilt}
        )
    return named


def tool_failure(type_name: str, message: str = "") -> ToolFailure:
    """A ``ToolFailure`` that is also an instance of the recorded exception type, where it can be named.

    A recorded ``TimeoutError`` the agent caught in production must be caught again in replay; a plain
    exception instead would crash the unchanged agent and report a regression that is not there.
    """
    base: Any = None
    builtin = getattr(builtins, type_name, None)
    if isinstance(builtin, type) and issubclass(builtin, Exception):
        base = builtin
    elif type_name in _FRAMEWORK_TYPES:
        module, cls = _FRAMEWORK_TYPES[type_name]
        base = getattr(sys.modules.get(module), cls, None)  # only a framework the agent already imported
    if base is None:
        return _named(type_name)(type_name, message)
    typed = _TYPED.get(base)
    if typed is None:

        def __init__(self: Any, type: str, message: str = "", _base: type = base) -> None:
            _base.__init__(self, message)  # type: ignore[misc]  # as the tool raised it: str() and .message are its message
            self.type, self.message = type, message

        try:
            typed = _TYPED[base] = builtins.type(
                f"Replayed{base.__name__}",
                (ToolFailure, base),
                {"__init__": __init__, "__module__": __name__, "__reduce__": _rebuilt},
            )
        except TypeError:  # a base whose layout cannot be combined
            return _named(type_name)(type_name, message)
    try:
        return typed(type_name, message)
    except Exception:
        return _named(type_name)(type_name, message)


NoFixtureReason = Literal["unknown_tool", "nothing_similar", "no_match", "already_played"]


class ClosestCall(TypedDict):
    """A recorded call like the unanswered one, and the argument paths where the two differ."""

    tool: str
    args: Any
    differs: list[str]


class NoFixtureResult(TypedDict):
    """What a call the recording cannot answer returns to the agent: a plain dict, so a framework hands
    it to the model as any tool result, and the report reads the same fields back from the log."""

    error: Literal["no_fixture"]
    reason: NoFixtureReason
    message: str
    hint: str
    closest: list[ClosestCall]


@dataclass(slots=True)
class ToolLog:
    """One call the agent made. ``outcome``: served | repeat (served again, redundant) | injected | no_fixture
    | agent (a call a framework answers by running an agent, whose own tool calls are served)."""

    name: str
    args: Any
    key: str
    outcome: str
    reason: str | None = None  # no_fixture reason code
    mode: str | None = None  # injected failure mode
    result: Any = None
    error: ToolFailure | None = None

    @property
    def missing(self) -> NoFixtureResult | None:
        """The ``no_fixture`` result this call got (None when it was answered)."""
        return cast(NoFixtureResult, self.result) if self.outcome == "no_fixture" else None


class FixtureTools:
    """Serves one case's fixtures by ``tool:args_hash`` (after ``ignore_args``), in recorded order.

    Thread-safe: a framework may run one turn's tool calls in parallel threads. One instance per case
    run; its ``log`` is what the report's divergence and redundancy figures are made of.
    """

    def __init__(
        self,
        case: AgentCase,
        *,
        raise_no_fixture: bool = False,
        ignore_args: Mapping[str, Sequence[str]] | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        """``ignore_args``: the project's (the config's ``ignore_args``), applied with the case's own:
        a path either one names is left out of matching. Keys are recomputed from the fixtures' args.
        ``redactor``: capture's, for fixtures whose args hold its placeholders (``key_of``)."""
        self.case = case
        self.raise_no_fixture = raise_no_fixture
        self.log: list[ToolLog] = []
        self._ignore: dict[str, list[str]] = {
            tool: sorted(set(case.ignore_args.get(tool, ())) | set((ignore_args or {}).get(tool, ())))
            for tool in {*case.ignore_args, *(ignore_args or {})}
        }
        self._by_key: dict[str, list[Fixture]] = {}
        self._by_tool: dict[str, list[Fixture]] = {}
        for fx in case.fixtures:
            key = fixture_key(fx.tool, fx.args, self._ignore.get(fx.tool, ()))
            self._by_key.setdefault(key, []).append(fx)
            self._by_tool.setdefault(fx.tool, []).append(fx)
        hidden = redactor is not None and any(PLACEHOLDER.search(canonical_json(fx.args)) for fx in case.fixtures)
        self._redactor = redactor if hidden else None
        self._served: dict[str, int] = {}
        self._injected: dict[str, int] = {}
        self._lock = threading.Lock()
        self.notes: list[str] = []  # what an adapter could not replay (a hosted tool left out)
        self._closed = False

    # -- the executor protocol ------------------------------------------------------------
    def execute(self, name: str, args: Any) -> Any:
        """The recorded result; raises the recorded or injected failure; ``no_fixture`` when unrecorded."""
        if self._closed:  # its case is over: whoever still holds it is a thread that outlived the case
            return seam.BLOCKED.execute(name, args)
        with self._lock:
            entry = self._resolve(name, args)
            self.log.append(entry)
        if entry.error is not None:
            raise entry.error
        if entry.outcome == "no_fixture" and self.raise_no_fixture:
            raise NoFixture(entry.result)
        return entry.result

    async def aexecute(self, name: str, args: Any) -> Any:
        return self.execute(name, args)

    def close(self) -> None:
        """The case is over. A call that still reaches this executor (a worker thread that a case started
        and that kept its context) is refused as one with no case, never served to a case it is not."""
        self._closed = True

    def delegated(self, name: str, args: Any) -> None:
        """Log a call that runs an agent, not a tool (an OpenAI Agents ``agent.as_tool()``): it is not
        served, the agent runs and its own tool calls come here."""
        with self._lock:
            self.log.append(ToolLog(name, args, self.key_of(name, args), "agent"))

    def note(self, text: str) -> None:
        """Say something about this replay the report must show (once)."""
        with self._lock:
            if text not in self.notes:
                self.notes.append(text)

    def recorded(self, name: str, args: Any) -> bool:
        """The case holds a fixture of this call (``@harvester.tool`` asks with and without defaults)."""
        return self.key_of(name, args) in self._by_key

    def holds_args(self, name: str, names: Iterable[str]) -> bool:
        """A recording of ``name`` holds every one of these arguments (``@harvester.tool`` asks, for the
        defaults a caller left out, which form of a call the recordings are in)."""
        wanted = list(names)
        return any(
            isinstance(fx.args, dict) and all(n in fx.args for n in wanted) for fx in self._by_tool.get(name, ())
        )

    def key_of(self, name: str, args: Any) -> str:
        """The fixture key of a call, as this executor matches it: ``ignore_args`` applied, and the args
        redacted where only that matches (``to="<email:8e65ee01>"`` recorded, the agent sends the address)."""
        ignore = self._ignore.get(name, ())
        key = fixture_key(name, args, ignore)
        if self._redactor is None or key in self._by_key:
            return key
        redacted = fixture_key(name, self._redactor.redact_value(args), ignore)
        return redacted if redacted in self._by_key else key

    # -- figures ------------------------------------------------------------------------------
    @property
    def redundant(self) -> int:
        return sum(e.outcome == "repeat" for e in self.log)

    @property
    def no_fixture(self) -> int:
        return sum(e.outcome == "no_fixture" for e in self.log)

    def unused(self) -> list[Fixture]:
        """Recorded calls the replay never made, in recorded order (each recording of a key is one call)."""
        with self._lock:
            left = {key: len(fxs) - min(self._served.get(key, 0), len(fxs)) for key, fxs in self._by_key.items()}
        out = []
        for key, fxs in self._by_key.items():
            out.extend(fxs[len(fxs) - left[key] :])
        order = {id(fx): i for i, fx in enumerate(self.case.fixtures)}
        return sorted(out, key=lambda fx: order[id(fx)])

    # -- resolution -----------------------------------------------------------------------
    def _resolve(self, name: str, args: Any) -> ToolLog:
        ignore = self._ignore.get(name, ())
        key = self.key_of(name, args)
        spec = self.case.inject_failures.get(name)
        if spec is not None and self._inject_now(name, spec):
            return _inject(ToolLog(name, args, key, "injected", mode=spec.mode), self._by_tool.get(name))
        recorded = self._by_key.get(key)
        if recorded is None:
            missing = self._diagnose(name, args, ignore)
            return ToolLog(name, args, key, "no_fixture", missing["reason"], result=missing)
        n = self._served.get(key, 0)
        self._served[key] = n + 1
        if n >= len(recorded):
            strict = self.case.strict_repeats
            if strict is True or (isinstance(strict, list) and name in strict):
                why = f"{name} with these arguments was recorded {len(recorded)} time(s) and every recording was "
                fix = "the agent repeats a call the recorded run made fewer times: fix the repetition, or take "
                missing = _no_fixture(
                    "already_played",
                    why + "already served (strict_repeats)",
                    fix + f"{name} out of strict_repeats to serve the last recording again",
                    [],
                )
                return ToolLog(name, args, key, "no_fixture", "already_played", result=missing)
            fx, outcome = recorded[-1], "repeat"
        else:
            fx, outcome = recorded[n], "served"
        if fx.error is not None:
            return ToolLog(name, args, key, outcome, error=tool_failure(fx.error.type, fx.error.message))
        return ToolLog(name, args, key, outcome, result=_copy(fx.result))

    def _inject_now(self, name: str, spec: InjectSpec) -> bool:
        n = self._injected.get(name, 0)
        if spec.times is not None and n >= spec.times:
            return False
        self._injected[name] = n + 1
        return True

    def _diagnose(self, name: str, args: Any, ignore: Any) -> NoFixtureResult:
        """The ``no_fixture`` result of a call with no recording: why, the closest recordings, the fix."""
        recorded = self._by_tool.get(name)
        if not recorded:
            known = ", ".join(sorted(self._by_tool)) or "none"
            return _no_fixture(
                "unknown_tool",
                f"the recorded run never called {name} (recorded tools: {known})",
                f"the agent now calls {name} where the recorded run did not: if that is intended, refresh the "
                f"case from a newer run with: harvester rerecord {self.case.id} [--trace TRACE_ID] (it keeps your "
                "edits); otherwise the agent took a new path",
                [],
            )
        mine = leaves(drop_paths(args, ignore), "(args)")
        ranked = []
        for i, fx in enumerate(recorded):
            theirs = leaves(drop_paths(fx.args, ignore), "(args)")
            agree = sum(1 for p, v in mine.items() if theirs.get(p) == v)
            differs = sorted(p for p in mine.keys() | theirs.keys() if mine.get(p) != theirs.get(p))
            ranked.append((-agree, i, fx, differs))
        ranked.sort(key=lambda r: r[:2])
        closest = [ClosestCall(tool=name, args=fx.args, differs=differs) for _, _, fx, differs in ranked[:MAX_CLOSEST]]
        best_agree, best_differs = -ranked[0][0], ranked[0][3]
        if best_agree == 0:
            return _no_fixture(
                "nothing_similar",
                f"no recorded {name} call shares any argument with {canonical_json(args)}",
                f"the agent calls {name} with entirely new arguments: if the new behaviour is right, refresh the "
                f"case with: harvester rerecord {self.case.id} [--trace TRACE_ID]",
                closest,
            )
        paths = sorted(set(ignore) | set(best_differs))
        toml_key = name if _BARE_KEY.match(name) else canonical_json(name)
        hint = (
            f"if {', '.join(best_differs)} change(s) on every run (ids, timestamps), ignore them: add "
            f'"ignore_args": {canonical_json({name: paths})} to the case file ({self.case.id}.json), or '
            f"{toml_key} = {canonical_json(paths)} under [tool.harvester.ignore_args] in pyproject.toml "
            "(ignore_args in harvester.toml), which applies to every case and to future harvests; otherwise "
            f"the agent now calls {name} differently: refresh the case with: harvester rerecord {self.case.id}"
        )
        return _no_fixture(
            "no_match",
            f"no recorded {name} call has these arguments; the closest differs at {', '.join(best_differs)}",
            hint,
            closest,
        )


def _no_fixture(reason: NoFixtureReason, message: str, hint: str, closest: list[ClosestCall]) -> NoFixtureResult:
    return NoFixtureResult(error="no_fixture", reason=reason, message=message, hint=hint, closest=closest)


def _inject(entry: ToolLog, recorded: list[Fixture] | None) -> ToolLog:
    mode = entry.mode or ""
    if mode in _FAILURES:
        type_, template = _FAILURES[mode]
        entry.error = tool_failure(type_, template.format(tool=entry.name))
    elif mode == "empty":
        shape = next((fx.result for fx in recorded or () if fx.error is None), "")
        entry.result = type(shape)() if isinstance(shape, (list, dict, str)) else None
    elif mode == "malformed":
        entry.result = _MALFORMED
    elif mode == "huge":
        entry.result = [{"id": i, "title": f"result {i}", "score": 0.5} for i in range(HUGE_RESULTS)]
    else:  # InjectSpec validates modes; a new one must be handled above
        raise ValueError(f"unknown failure mode {mode!r}")
    return entry


def _copy(value: Any) -> Any:
    """A private copy, so an agent that mutates a result cannot change what a repeat call serves."""
    if isinstance(value, (dict, list)):
        return orjson.loads(orjson.dumps(value, default=str))
    return value
