"""``trajectory_match``: the run's tool calls against a reference list of calls.

The semantics are those of LangChain agentevals' trajectory match evaluator, read on a ``Run``: the
run's side is the calls that executed (ok or error; a denied request did no work), and a reference
call pairs with a run call of the same name whose arguments agree under the tool's args mode.

- ``strict``: the same calls in the same order, except that the calls one model response asked for
  together may come in any order among themselves (``run.llm_calls[i].requests`` says which).
- ``unordered``: the same calls, as a multiset. ``subset``: the run did nothing beyond the reference.
  ``superset``: the run did at least the reference's work. Repeats count, never collapse.

Pairings are a maximum bipartite matching (augmenting paths): with loose args modes, pairing the
first fit found can fail where a pairing exists.

In a harvested case (``HarvestedTrajectoryMatch``) it is proposed ``superset`` with args ``ignore``
against the recorded successful calls: the replay did at least the work the recording needed, so an
agent that skips a tool fails and a reworded query passes. A rerecord keeps the reviewer's mode and
args and takes the new recording's reference; ``review`` sets the mode and args mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ..canonical import canonical_bytes, canonical_json, drop_paths
from ..model import Run, ToolCall
from ._base import Check, register
from ._life import CHECKS, Ask, Recording, Spec

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["ARGS_MODES", "MODES", "HarvestedTrajectoryMatch", "trajectory_match", "trajectory_reference"]

MODES = ("strict", "unordered", "subset", "superset")
ARGS_MODES = ("exact", "ignore", "subset", "superset")
_SHOWN_ARGS = 80  # characters of a call's canonical args shown in a detail
_SHOWN_CALLS = 3  # calls listed in a detail before "and N more"


class _Call(NamedTuple):
    """One side's call, ready to compare: args after the tool's ignored paths, encoded once."""

    name: str
    args: Any  # as given (None read as {}), for the detail
    whole: bytes  # canonical bytes of the compared args
    keyed: dict[str, bytes] | None  # canonical bytes per top-level key, when the args are an object


def _one_of(what: str, value: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _reference(reference: Any) -> list[dict[str, Any]]:
    if not isinstance(reference, (list, tuple)):
        raise ValueError(
            "reference must be a list of calls ({'name': ..., 'args': ...}), "
            f"got {type(reference).__name__} {reference!r:.80}"
        )
    out = []
    for i, item in enumerate(reference):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise ValueError(f"reference[{i}] must be an object with a string 'name', got {item!r:.80}")
        args = item.get("args")
        out.append({"name": item["name"], "args": {} if args is None else args})
    return out


def _overrides(overrides: Any) -> dict[str, str]:
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise ValueError(f"overrides must be an object {{tool: args mode}}, got {overrides!r:.80}")
    return {str(tool): _one_of(f"overrides[{tool!r}]", mode, ARGS_MODES) for tool, mode in overrides.items()}


def _ignore(ignore: Any) -> dict[str, list[str]]:
    if ignore is None:
        return {}
    if not isinstance(ignore, Mapping):
        raise ValueError(f"ignore must be an object {{tool: [arg paths]}}, got {ignore!r:.80}")
    out = {}
    for tool, paths in ignore.items():
        if not isinstance(paths, (list, tuple)) or not all(isinstance(p, str) for p in paths):
            raise ValueError(f"ignore[{tool!r}] must be a list of dotted arg paths, got {paths!r:.80}")
        out[str(tool)] = list(paths)
    return out


def _call(name: str, args: Any, ignore: dict[str, list[str]]) -> _Call:
    shown = {} if args is None else args
    compared = drop_paths(shown, ignore[name]) if name in ignore else shown
    keyed = {str(k): canonical_bytes(v) for k, v in compared.items()} if isinstance(compared, dict) else None
    return _Call(name, shown, canonical_bytes(compared), keyed)


def _args_agree(mode: str, ref: _Call, got: _Call) -> bool:
    if mode == "ignore":
        return True
    if mode == "exact" or ref.keyed is None or got.keyed is None:
        return ref.whole == got.whole
    # subset: the run call's args are within the reference's; superset: they hold the reference's.
    small, big = (got.keyed, ref.keyed) if mode == "subset" else (ref.keyed, got.keyed)
    return all(k in big and big[k] == v for k, v in small.items())


def _matching(n_left: int, adjacent: list[list[int]]) -> dict[int, int]:
    """A maximum matching, left index -> right index, by augmenting paths (Kuhn), iteratively."""
    owner: dict[int, int] = {}  # right -> left
    for start in range(n_left):
        seen: set[int] = set()
        stack = [(start, iter(adjacent[start]))]
        path: list[tuple[int, int]] = []  # the edges that led to each frame above the first
        while stack:
            left, rights = stack[-1]
            for right in rights:
                if right in seen:
                    continue
                seen.add(right)
                path.append((left, right))
                if right not in owner:
                    owner.update((r, left_) for left_, r in path)
                    stack = []
                else:
                    stack.append((owner[right], iter(adjacent[owner[right]])))
                break
            else:
                stack.pop()
                if path:
                    path.pop()
    return {left: right for right, left in owner.items()}


def _show(call: _Call, with_args: bool = True) -> str:
    if not with_args:
        return call.name
    if call.args == {}:
        return f"{call.name}()"
    text = canonical_json(call.args)
    if len(text) > _SHOWN_ARGS:
        text = text[: _SHOWN_ARGS - 3] + "..."
    return f"{call.name}({text})"


def _listing(calls: Sequence[_Call], with_args: bool = True) -> str:
    if not calls:
        return "nothing"
    shown = ", ".join(_show(c, with_args) for c in calls[:_SHOWN_CALLS])
    more = len(calls) - _SHOWN_CALLS
    return f"{shown} and {more} more" if more > 0 else shown


def _compared(expected: Sequence[_Call], got: Sequence[_Call]) -> str:
    """``expected X, got Y``: names only when the names differ, else with the args that do."""
    with_args = sorted(c.name for c in expected) == sorted(c.name for c in got)
    return f"expected {_listing(expected, with_args)}, got {_listing(got, with_args)}"


def _groups(run: Run) -> list[list[int]]:
    """Indices into the executed calls, grouped by the model response that asked for them together.

    A call joins the response whose requests hold its ``call_id`` (a request is used once, the next
    response at or after the last one first, so ids reused across responses stay apart); a call with
    no id, or an id no response holds, is a group of its own. Only neighbouring calls are grouped.
    """
    holders: dict[str, list[int]] = {}
    for i, llm in enumerate(run.llm_calls):
        for request in llm.requests:
            if request.call_id:
                holders.setdefault(request.call_id, []).append(i)
    keys: list[tuple[str, int]] = []
    at = 0
    for n, call in enumerate(run.calls):
        found = holders.get(call.call_id or "")
        if found:
            at = next((i for i in found if i >= at), found[0])
            found.remove(at)
            key = ("response", at)
        else:
            key = ("call", n)
        if call.executed:
            keys.append(key)
    groups: list[list[int]] = []
    for n, key in enumerate(keys):
        if groups and keys[n - 1] == key:
            groups[-1].append(n)
        else:
            groups.append([n])
    return groups


def trajectory_match(
    reference: Sequence[Mapping[str, Any]],
    mode: str = "strict",
    args: str = "exact",
    overrides: Mapping[str, str] | None = None,
    ignore: Mapping[str, Sequence[str]] | None = None,
) -> Check:
    """The run's executed calls match ``reference`` (``[{"name": ..., "args": ...}, ...]``) by ``mode``.

    ``args`` says when two calls of one tool pair: ``exact`` (equal), ``ignore`` (always), ``subset``
    (the run call's args are within the reference's), ``superset`` (the run call's args hold the
    reference's); ``overrides`` sets it per tool. ``ignore`` drops arg paths per tool on both sides.
    """
    ref_spec = _reference(reference)
    mode = _one_of("mode", mode, MODES)
    args_mode = _one_of("args", args, ARGS_MODES)
    modes = _overrides(overrides)
    dropped = _ignore(ignore)
    expected = [_call(c["name"], c["args"], dropped) for c in ref_spec]
    how = ", ".join([mode, f"args {args_mode}", *(f"{tool} args {m}" for tool, m in modes.items())])

    def pairs(ref: _Call, got: _Call) -> bool:
        return ref.name == got.name and _args_agree(modes.get(ref.name, args_mode), ref, got)

    def pair_all(got: Sequence[_Call], want: Sequence[_Call]) -> dict[int, int]:
        return _matching(len(got), [[j for j, r in enumerate(want) if pairs(r, g)] for g in got])

    def strict(run: Run, got: list[_Call]) -> str | None:
        pos = 0
        for group in _groups(run):
            mine = [got[i] for i in group]
            block = expected[pos : pos + len(mine)]
            if not block:
                return (
                    f"run made {_count(len(got), 'call')}, reference has {len(expected)}: extra {_listing(got[pos:])}"
                )
            if len(block) < len(mine) or len(pair_all(mine, block)) < len(mine):
                if len(mine) == 1:
                    return f"step {pos + 1}: {_compared(block, mine)}"
                steps = f"steps {pos + 1}-{pos + len(mine)} (one model response)"
                return f"{steps}: {_compared(block, mine)}"
            pos += len(mine)
        if pos < len(expected):
            return f"run made {_count(pos, 'call')}, reference has {len(expected)}: missing {_listing(expected[pos:])}"
        return None

    def fn(run: Run) -> tuple[bool, str]:
        executed: list[ToolCall] = [c for c in run.calls if c.executed]
        got = [_call(c.name, c.args, dropped) for c in executed]
        if mode == "strict":
            problem = strict(run, got)
        else:
            paired = pair_all(got, expected)
            matched = set(paired.values())
            missing = [r for j, r in enumerate(expected) if j not in matched]
            extra = [g for i, g in enumerate(got) if i not in paired]
            parts = []
            if missing and mode in ("unordered", "superset"):
                parts.append(f"missing {_listing(missing)}")
            if extra and mode in ("unordered", "subset"):
                parts.append(f"extra {_listing(extra)}")
            problem = "; ".join(parts) or None
        if problem:
            return False, f"{problem} ({how}; run called {[c.name for c in executed]})"
        if mode == "subset":
            return (
                True,
                f"trajectory matches ({how}): {_count(len(got), 'run call')} paired (reference has {len(expected)})",
            )
        return True, f"trajectory matches ({how}): {_count(len(expected), 'reference call')} paired"

    spec: dict[str, Any] = {"reference": ref_spec, "mode": mode, "args": args_mode}
    if modes:
        spec["overrides"] = modes
    if dropped:
        spec["ignore"] = dropped
    path = " -> ".join(c["name"] for c in ref_spec) or "no calls"
    return Check("trajectory_match", fn, spec, title=f"trajectory_match({how}: {path})")


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


register()(trajectory_match)


# -- in a harvested case ------------------------------------------------------------------------------
# Proposed: every call the recording needed, in any order, maybe more, with args free.
PROPOSED_MODE, PROPOSED_ARGS = "superset", "ignore"


def trajectory_reference(recording: Recording, mode: str) -> list[dict[str, Any]]:
    """The recorded calls a ``trajectory_match`` of ``mode`` compares with, in order: every executed
    call (a failed attempt included: the check reads a run's executed calls), or for ``superset``
    only the successful ones (the work the task needed). A forbidden tool is never in it: the check
    would demand what ``never_used`` forbids."""
    banned = set(recording.forbidden)
    return [
        {"name": f.tool, "args": f.args}
        for f in recording.fixtures
        if f.tool not in banned and not (mode == "superset" and f.error is not None)
    ]


class HarvestedTrajectoryMatch:
    """``trajectory_match``'s life cycle: kept among the case's checks, shown by its label there."""

    name = "trajectory_match"
    field = "trajectory"
    slot = CHECKS

    def propose(self, recording: Recording, config: Config) -> list[Spec]:
        reference = trajectory_reference(recording, PROPOSED_MODE)
        if not reference:  # a run that called no tool: nothing to demand
            return []
        return [{"check": self.name, "reference": reference, "mode": PROPOSED_MODE, "args": PROPOSED_ARGS}]

    def refresh(self, reviewed: list[Spec], fresh: list[Spec], recording: Recording) -> list[Spec]:
        """The reviewer's mode and args, kept; the reference is the new recording's."""
        return [
            {**spec, "reference": trajectory_reference(recording, str(spec.get("mode", "strict")))} for spec in reviewed
        ]

    def edit(self, value: list[Spec], recording: Recording, ask: Ask) -> list[Spec]:
        """The mode: ``superset`` (at least the recorded work), ``subset`` (no more than it: an agent that
        now needs fewer steps), ``unordered``, ``strict``; '-' drops the check. Then the args mode."""
        if not value:
            raise ValueError(f"this case has no {self.name} check (a run that called no tool)")
        spec, rest = value[0], value[1:]
        question = f"trajectory mode ({', '.join(MODES)}; '-' drops the check)"
        mode = ask(question, str(spec.get("mode", PROPOSED_MODE)), [*MODES, "-"])
        if mode == "-":
            return rest
        args = ask(f"args mode ({', '.join(ARGS_MODES)})", str(spec.get("args", PROPOSED_ARGS)), ARGS_MODES)
        # strict, unordered and subset read every executed call, a failed attempt included
        return [{**spec, "mode": mode, "args": args, "reference": trajectory_reference(recording, mode)}, *rest]

    def compiled(self, spec: Spec, recording: Recording) -> Spec:
        """Args compare after the case's ``ignore_args`` unless the spec names its own ``ignore``."""
        if "ignore" in spec or not recording.ignore_args:
            return spec
        return {**spec, "ignore": recording.ignore_args}

    def render(self, value: list[Spec]) -> str | None:
        return None

    def changes(self, before: list[Spec], after: list[Spec]) -> list[str]:
        return [
            f"{self.name} reference: {len(spec.get('reference') or [])} calls (mode kept)"
            for spec in after
            if spec not in before
        ]
