"""The sandbox tier: tools a project names run for real during a replay (``replay --sandbox``), every
other tool stays recorded.

A nightly job may let ``get_order`` hit a sandbox with seeded data while ``issue_refund`` is still
served from its fixtures. What runs for real is decided per call by the case's executor
(``SandboxTools``): the adapters ask ``seam.sandboxed`` and call the tool's own body when it says so.
The call is logged as ``sandbox`` with the recording it stands in for, so the hermetic cross-check
pairs its tool span with the log (it is never a live-call breach), and the report compares what the
sandbox answered with what production answered, path by path.

A glob never matches a mutating tool (the config's ``mutating_tools``, a case's ``forbidden_tools``):
a tool that changes the world runs for real only when the config names it in full. The seal still
holds: it allows the sandbox's hosts besides the usual ones, nothing else.
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..canonical import json_value, leaves
from ..case import AgentCase
from ..config import Config
from ..errors import ConfigError
from ..fixtures import FixtureTools, ToolLog
from ..model import Run
from ..report import MAX_CALLS, SandboxCall, args_text

__all__ = ["Sandbox", "SandboxTools", "sandbox_calls", "sandbox_env", "sandbox_for"]

_GLOB = frozenset("*?[")


def _glob(entry: str) -> bool:
    return any(ch in _GLOB for ch in entry)


@dataclass(frozen=True)
class Sandbox:
    """The tools a replay runs for real (names or globs), the environment pointing them at the sandbox,
    the hosts the seal then allows, and the mutating tools no glob may match (names or globs)."""

    tools: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    hosts: tuple[str, ...] = ()
    mutating_tools: tuple[str, ...] = ()

    def runs(self, tool: str, forbidden: Iterable[str] = ()) -> bool:
        """Whether ``tool`` runs for real: named in full, or matched by a glob and not mutating
        (``forbidden``: the case's forbidden tools, mutating for this case)."""
        if tool in self.tools:
            return True
        if tool in forbidden or any(fnmatch.fnmatchcase(tool, p) for p in self.mutating_tools):
            return False
        return any(fnmatch.fnmatchcase(tool, p) for p in self.tools if _glob(p))


class SandboxTools(FixtureTools):
    """A case's executor that lets its sandbox tools run: each such call is logged (outcome ``sandbox``)
    with the recorded result or failure it stands in for (``reason`` ``no_fixture``'s when none), and
    consumes that recording as a served call would. A tool the case breaks on purpose (a recovery
    variant's injected failure) is not run: the variant tests the agent with that tool failing."""

    def __init__(self, case: AgentCase, sandbox: Sandbox, **kwargs: Any) -> None:
        super().__init__(case, **kwargs)
        self.sandbox = sandbox
        self._forbidden = frozenset(case.forbidden_tools)

    def sandboxed(self, name: str, args: Any) -> bool:
        if name in self.case.inject_failures or not self.sandbox.runs(name, self._forbidden):
            return False
        with self._lock:
            if self._closed:  # the case is over: a late call is refused by ``execute`` as one without a case
                return False
            stood_for = self._resolve(name, args)  # the recording this call stands in for
            self.log.append(
                ToolLog(
                    name,
                    args,
                    stood_for.key,
                    "sandbox",
                    reason=stood_for.reason,
                    result=stood_for.result,
                    error=stood_for.error,
                )
            )
        return True


def sandbox_calls(run: Run | None, tools: FixtureTools | None) -> list[SandboxCall]:
    """Each call that ran for real, paired with its tool span in ``run`` (same tool and arguments, in
    order), and where what it returned differs from the recording: paths (``.status``), ``(error)``
    when one failed and the other did not, ``(result)`` for a whole value."""
    if tools is None:
        return []
    calls = list(run.calls) if run is not None else []
    out = []
    for entry in (e for e in tools.log if e.outcome == "sandbox"):
        found = next((c for c in calls if c.name == entry.name and tools.key_of(c.name, c.args) == entry.key), None)
        recorded = entry.reason is None
        if found is not None:
            calls.remove(found)
        differs: list[str] = []
        if recorded and found is not None:
            if (entry.error is not None) != (found.error is not None):
                differs = ["(error)"]
            elif entry.error is not None and found.error is not None:
                differs = [] if entry.error.type == found.error.type else ["(error)"]
            else:
                differs = _differs(entry.result, found.result)
        args, traced = args_text(entry.args), found is not None
        out.append(SandboxCall(tool=entry.name, args=args, recorded=recorded, traced=traced, differs=differs))
        if len(out) == MAX_CALLS:
            break
    return out


def _differs(recorded: Any, actual: Any) -> list[str]:
    """The leaf paths where two results differ, as ``.a.b`` (``(result)``: the value as a whole)."""
    mine, theirs = leaves(json_value(recorded)), leaves(json_value(actual))
    return [f".{p}" if p else "(result)" for p in sorted(mine.keys() | theirs.keys()) if mine.get(p) != theirs.get(p)]


@contextlib.contextmanager
def sandbox_env(env: Mapping[str, str]) -> Iterator[None]:
    """The sandbox's environment set for the replay's duration (the process's: tool bodies, and the
    processes they start, read it), the previous values restored after."""
    outer = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in outer.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def sandbox_for(config: Config, cases: Sequence[AgentCase]) -> tuple[Sandbox, list[str]]:
    """The config's sandbox checked against the tools ``cases`` know: ``ConfigError`` for a glob that
    would match a mutating tool (name it in full instead); a warning, with the closest names, for an
    entry that matches no tool. Without cases only the config's mutating tools are known (and the
    sandbox still refuses, call by call, to let a glob run a mutating tool)."""
    policy = config.sandbox
    field_name = config.field("sandbox.tools")
    if not policy.tools:
        raise ConfigError("--sandbox needs tools to run for real; name them here", file=config.source, field=field_name)
    known: dict[str, bool] = {}  # tool -> mutating
    for name in config.mutating_tools:
        if not _glob(name):
            known[name] = True
    for case in cases:
        forbidden = set(case.forbidden_tools)
        names = [*(f.tool for f in case.fixtures), *case.recorded.trajectory, *case.appropriate_tools, *forbidden]
        for name in names:
            known[name] = known.get(name, False) or name in forbidden or config.is_mutating(name)
    warnings = []
    for entry in policy.tools:
        matched = [t for t in known if fnmatch.fnmatchcase(t, entry)] if _glob(entry) else [entry] * (entry in known)
        hurt = [t for t in matched if known[t] and t != entry]
        if hurt:
            raise ConfigError(
                f"{entry!r} would match the mutating tool {hurt[0]!r}: a glob never runs a mutating tool for "
                f"real; name it in full to sandbox it",
                file=config.source,
                field=field_name,
            )
        if not matched and cases:  # without cases (shadow streams its runs) nothing is known to miss
            close = difflib.get_close_matches(entry, sorted(known), n=3, cutoff=0.5)
            hint = f" (closest: {', '.join(close)})" if close else ""
            warnings.append(f"warning: {field_name}: {entry!r} matches no tool the cases know{hint}")
    sandbox = Sandbox(tuple(policy.tools), dict(policy.env), tuple(policy.hosts), tuple(config.mutating_tools))
    return sandbox, warnings
