"""The seal: while a replay runs, nothing leaves the process that its case did not expect.

The adapters decide how a tool call is *served*; the seal is what guarantees that nothing else
*leaves*, whatever way the agent was written (a framework harvester knows, a raw SDK loop, a helper
thread). It is a property of the process, not of a framework: a PEP 578 audit hook sees every
outbound connection (``socket.connect``/``connect_ex``, ``sendto``, ``sendmsg``: every client library,
sync or asyncio, ends there), every name lookup (``socket.getaddrinfo``: a host that does not resolve
was still a host the agent tried to reach) and every process start (``subprocess``, ``os.system``,
``os.exec*``, ``os.posix_spawn``, ``os.spawn*``), in every thread, and refuses what the policy does not
allow by raising ``Sealed`` (a ``PermissionError``) inside the agent, where the call was made.

Which policy: the case's seal travels in the OpenTelemetry context with its executor (into tasks and
threads, as ``seam`` carries it); code that lost its case's context while a replay runs meets the
suite's seal, which allows what any case may (the config's hosts and commands, every case's model
hosts), and whose refusals fail every case then in flight. A forked child inherits the hook and its
case's seal with the process; a Python child seals itself with its case's setting (``child_setting``,
which names the seal, so its refusals come back to that case through the log). Telemetry the
OpenTelemetry SDK exports (its processors export with instrumentation suppressed) passes: replay
spans are marked and ``harvester serve`` drops them.

A recording that named only providers (OpenInference's model spans name no URL) cannot say where the
agent's model is: in a replay of it on the live model, a request the agent's model SDK client makes
(``seam.model_call``, marked on the client's ``request`` with its endpoint) may reach that endpoint, a
gateway or a local server: the case's policy then reads the mark (``model_endpoint``, given by
``Reach.client_endpoints``). Any other host it asks for (an HTTP hook, a proxy), and the endpoint
asked for by anything else, are refused as before.

A connection to an address is allowed when the address is allowed, or when it came from looking up
an allowed name: ``socket.getaddrinfo`` is wrapped to remember which name each address came from,
which is also how a refusal names the host rather than its address. An address found some other way
(a resolver outside Python) is refused, and named by its address: the seal fails closed.

C code that connects past Python's sockets (libpq, libcurl, gRPC's core, a uvloop loop, ``ctypes``)
raises no audited event: on Linux, ``_libc.c`` points each loaded library's imported connections and
name lookups at the same checks (``_c_calls``).

The hook is installed once (an audit hook cannot be removed). It is ``_hook.c``'s where it was built:
an event it does not watch costs a few string compares, and a connection the policy allows by its
exact name or address (the policy's ``fast``) is decided there. Anything else calls the same Python
checks, which are the whole hook where the C one could not be built.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from opentelemetry import context as otel_context
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY

from .. import seam
from ..errors import Sealed
from . import _c_calls
from ._aside import set_aside
from ._guard import CHILD_ENV, COMMON_FAMILIES, KINDS, MAX_RESOLVED, Guard, resolved
from ._policy import Policy
from ._refusal import MAX_REFUSALS, Refusal, in_flight, new_log, remove_log
from ._starts import Carried, called_from, first_on_path

try:  # how multiprocessing starts a process, with no audited event of its own (POSIX only)
    import _posixsubprocess
except ImportError:  # pragma: no cover - Windows
    _posixsubprocess = None  # type: ignore[assignment]
try:  # the hook in C (``_hook.c``), built where a compiler is; without it the same checks run in Python
    from . import _hook
except ImportError:  # pragma: no cover - a machine that could not build it
    _hook = None  # type: ignore[assignment]

__all__ = [
    "CHILD_ENV",
    "HOOK_ENV",
    "SEAL",
    "Seal",
    "install",
    "current",
    "installed",
    "last_seq",
    "model_endpoint",
    "sealing",
    "suite_refusals_since",
    "within",
]

SEAL = otel_context.create_key("harvester.seal")
HOOK_ENV = "HARVESTER_SEAL_HOOK"  # "python": the Python hook even where the C one was built
_HERE = os.path.dirname(os.path.abspath(__file__))
_CHILD_DIR = os.path.join(_HERE, "_child")


class Seal:
    """One case-trial's seal (or the suite's): what it allows, and what it refused."""

    __slots__ = (
        "__weakref__",
        "_read",
        "_setting",
        "case",
        "closed",
        "fast",
        "handed",
        "here",
        "id",
        "lock",
        "log",
        "pid",
        "policy",
        "refused",
        "refusals",
    )

    def __init__(self, policy: Policy, case: str | None = None) -> None:
        self.policy, self.case = policy, case  # a case's id: what a refusal made after it ended names
        self.refusals: list[Refusal] = []  # the first MAX_REFUSALS
        self.refused = 0
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.log: str | None = None  # the suite's: where child processes write their refusals
        self._read = 0  # how far the log has been read
        self.here = (policy, self.refuse)  # what the audit hook asks for, made once
        self.fast = policy.fast  # what the C hook reads: what the policy allows as it stands
        self.id = next(_ids)  # what a child's refusal names, to come back to this seal
        self._setting: str | None = None  # what a Python child started under this seal seals itself with
        self.closed = False  # a case's, once its refusals were read: a later one is the suite's
        self.handed = 0  # a suite's: how many of its refusals were reported (a sealed import's)
        _seals[self.id] = self

    def refuse(self, what: str, target: str, why: str) -> None:
        """Remember the refusal (a forked child writes it to the log), then raise it into the code that tried."""
        during = in_flight()
        if os.getpid() != self.pid:
            _log_refusal(what, target, why, during or f"process {os.getpid()} forked by the agent", self.id)
        else:
            self._keep(what, target, why, during)
        raise Sealed(f"harvester replay sealed {what} {target}: {why}")

    def _keep(self, what: str, target: str, why: str, during: str | None, *, child: bool = False) -> None:
        global _seq
        with _seq_lock:
            _seq += 1
            seq = _seq
        with self.lock:
            if not self.closed and (self not in _suites or self is _suites[-1]):
                self.refused += 1  # the last MAX_REFUSALS kept: the cases in flight read the newest
                self.refusals.append(Refusal(seq, what, target, during, why))
                del self.refusals[:-MAX_REFUSALS]
                return
        # Made by what outlived this seal's case (a thread, a pool's worker), or naming a sealed import's
        # seal while its replay runs: code without a case's context, the current suite's.
        current = _suites[-1] if _suites else None
        if current is not None and current is not self:
            late = "(started by an earlier case)" if child else f"after case {self.case or '?'} ended"
            during = f"{during or 'code'} {late}" if self.closed else during
            current._keep(what, target, why, during, child=child)

    def close(self) -> tuple[list[Refusal], int]:
        """A case's refusals (and how many, kept or not), read once; later ones are the suite's."""
        with self.lock:
            self.closed = True
            return list(self.refusals), self.refused

    def child_setting(self) -> str:
        """What a Python process started under this seal seals itself with: its hosts and commands, the
        suite's log, and this seal's id, which its refusals name."""
        if self._setting is None:
            log = self.log or (_suites[-1].log if _suites else None)
            setting = {"hosts": list(self.policy.hosts), "commands": list(self.policy.commands), "dir": _HERE}
            self._setting = json.dumps({**setting, "log": log, "seal": self.id})
        return self._setting

    def collect(self) -> None:
        """Take in the refusals child processes wrote to the log since the last read: each to the seal
        it names (a case's, whose process started the child), else to this one."""
        if self.log is None or not _GUARD.started:  # no process started while sealed: nothing to read
            return
        try:
            if os.stat(self.log).st_size <= self._read:  # nothing new: the usual case, one stat per case
                return
        except OSError:
            return
        with self.lock:
            try:
                with open(self.log, "rb") as f:
                    f.seek(self._read)
                    lines = f.read().splitlines(keepends=True)
            except OSError:
                return
            complete = [line for line in lines if line.endswith(b"\n")]
            self._read += sum(len(line) for line in complete)
        for line in complete:
            try:
                said = json.loads(line)
                owner = _seals.get(said.get("seal")) if isinstance(said.get("seal"), int) else None
                (owner or self)._keep(
                    str(said["what"]), str(said["target"]), str(said["why"]), str(said.get("during") or ""), child=True
                )
            except (ValueError, KeyError, TypeError):
                continue


_seq = 0  # refusals ever made in this process: a case owns the suite seal's refusals after its start
_ids = itertools.count(1)
_seals: weakref.WeakValueDictionary[int, Seal] = weakref.WeakValueDictionary()  # by id, while in use
_seq_lock = threading.Lock()
_suites: list[Seal] = []  # the seals of the sealed replays running now (the last one is current)
_installed: str | None = None
_native_context: ContextVar[otel_context.Context] | None = None  # the variable the C hook reads
_install_lock = threading.Lock()


def _policy_here(reaching: bool) -> tuple[Policy, Callable[[str, str, str], None]] | None:
    """The audit hook's question, in one read of the context. Not the agent's: harvester's own work
    (``seam.own_work``: a judge, a callback), and a connection the OpenTelemetry SDK makes to export
    telemetry (its processors export with instrumentation suppressed; code that merely suppresses
    instrumentation, ``suppress_tracing()``, is still the agent's)."""
    ctx = otel_context.get_current()
    if seam.own_work_now(ctx) or (reaching and ctx.get(_SUPPRESS_INSTRUMENTATION_KEY) and _exporting()):
        return None
    seal = ctx.get(SEAL)
    if seal is None:
        return _suites[-1].here if _suites else None
    # a case's seal in a thread that outlived its replay: the process is unsealed again
    return seal.here if isinstance(seal, Seal) and (_suites or not seal.closed) else None


_SDK = os.sep + os.path.join("opentelemetry", "sdk") + os.sep  # its processors and readers export from here


def _exporting() -> bool:
    """Called from the OpenTelemetry SDK's span or log processors or metric readers (within 80 frames;
    docs/seal.md): an exporter the agent calls itself is the agent's."""
    return called_from(sys._getframe(2), lambda name: _SDK in name, 80)


def _log_refusal(what: str, target: str, why: str, during: str, seal: int) -> None:
    """A forked child's refusal, for the replay that started it (the child's memory is its own) and the
    seal it was made under."""
    log = _suites[-1].log if _suites else None
    if log is not None:
        said = {"what": what, "target": target, "why": why, "during": during, "seal": seal}
        with contextlib.suppress(OSError):  # appended, never made again: a log the replay removed stays removed
            fd = os.open(log, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, (json.dumps(said) + "\n").encode())
            finally:
                os.close(fd)


_GUARD = Guard(_policy_here)


def _case_setting() -> str | None:
    """The child setting of the case the calling code runs in (``Carried.current``); None outside one."""
    seal = otel_context.get_current().get(SEAL)
    return seal.child_setting() if isinstance(seal, Seal) else None


def _context_variable() -> ContextVar[otel_context.Context] | None:
    """The variable OpenTelemetry keeps its context in (the default runtime's, which the C hook reads)."""
    variable = getattr(getattr(otel_context, "_RUNTIME_CONTEXT", None), "_current_context", None)
    return variable if isinstance(variable, ContextVar) else None


def install() -> None:
    """Install the audit hook and the name memory, once per process: the C hook when it was built, this
    is the main interpreter and OpenTelemetry keeps its context in a context variable; else (or with
    ``HARVESTER_SEAL_HOOK=python``) the Python hook. Raises ``RuntimeError`` when another audit hook
    refused it: a replay then fails rather than run unsealed."""
    global _installed, _native_context
    with _install_lock:
        if _installed is not None:
            return
        native = _hook is not None and os.environ.get(HOOK_ENV, "").lower() != "python"
        variable = _context_variable() if native else None
        if variable is not None:
            try:
                _hook.install(_GUARD.audit, dict(KINDS), variable, SEAL, _suites, resolved, Seal, COMMON_FAMILIES)
            except RuntimeError:  # a subinterpreter, or vetoed: the Python hook says which
                variable = None
        if variable is not None:
            socket.getaddrinfo = _hook.remembering(socket.getaddrinfo, resolved, MAX_RESOLVED)
            _installed, _native_context = "C", variable
        else:
            _GUARD.add()
            socket.getaddrinfo = _GUARD.remembering(socket.getaddrinfo)
            _installed = "Python"
        if _posixsubprocess is not None:  # and subprocess's own name for it, bound at its import
            _posixsubprocess.fork_exec = Guard.forking(_posixsubprocess.fork_exec)
            if getattr(subprocess, "_fork_exec", None) is not None:
                subprocess._fork_exec = Guard.forking(subprocess._fork_exec)  # type: ignore[attr-defined]
            # posix_spawn reads a given environment before its audited event, past the seal: fork_exec
            setattr(subprocess, "_USE_POSIX_SPAWN", False)  # noqa: B010 (a Final of the stubs)
        Guard.resolving(socket.socket, _hook if _installed == "C" else None)  # a name: looked up before its event
        _c_calls.seal(_GUARD.audit, _suites)


def installed() -> str | None:
    """Which hook seals this process: ``"C"``, ``"Python"``, or None before the first sealed replay."""
    return _installed


@contextlib.contextmanager
def sealing(policy: Policy, *, until_exit: bool = False) -> Iterator[Seal]:
    """Seal the process for the duration of a replay; yields the suite's seal, with ``policy``: what code
    without a case's context may reach, and what a Python process the agent starts seals itself with
    (``_child``; its refusals come back through a log the suite seal reads).

    ``until_exit``: the process stays sealed after the block, until it exits (``harvester replay``'s
    import of the agent: what the import started, a thread, a pool, finds no moment unsealed before,
    between or after the replay, which takes over from this seal while it runs)."""
    install()
    if _installed == "C" and _context_variable() is not _native_context:
        raise RuntimeError("OpenTelemetry's runtime context was replaced after the seal's C hook was installed")
    seal = Seal(policy)
    enclosing = _suites[-1] if _suites else None
    if enclosing is None:
        seal.log = log = new_log()
    else:  # a replay inside a sealed import's seal: one log, as processes the import started write to it
        enclosing.collect()
        seal.log, seal._read = enclosing.log, enclosing._read
        for r in enclosing.refusals[enclosing.handed :]:  # made since the import: before any case, the replay's
            seal._keep(r.what, r.target, r.why, r.during)
        enclosing.handed = len(enclosing.refusals)
    outer = {name: os.environ.get(name) for name in (CHILD_ENV, "PYTHONPATH")}
    text = seal.child_setting()
    os.environ.update({CHILD_ENV: text, "PYTHONPATH": first_on_path(_CHILD_DIR, outer["PYTHONPATH"])})
    carried, current = Carried.carry(text), Carried.current
    Carried.current = _case_setting
    _suites.append(seal)
    aside = set_aside()
    aside.__enter__()
    try:
        yield seal
    finally:
        if until_exit:  # the process stays as it is now, and the log until the process exits
            if enclosing is None:
                atexit.register(remove_log, log)
        else:
            aside.__exit__(None, None, None)
            _unseal(seal, enclosing, (carried, current), outer)


def _unseal(
    seal: Seal,
    enclosing: Seal | None,
    carried: tuple[str | None, Callable[[], str | None] | None],
    outer: dict[str, str | None],
) -> None:
    """Undo what ``sealing`` did: the process as it was before (still sealed by an enclosing seal)."""
    _suites.remove(seal)
    if enclosing is not None:
        enclosing._read = max(enclosing._read, seal._read)
    Carried.carry(carried[0])
    Carried.current = carried[1]
    for name, value in outer.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if enclosing is None and seal.log is not None:
        remove_log(seal.log)


def within(ctx: otel_context.Context, seal: Seal | None) -> otel_context.Context:
    """``ctx`` with the case's seal in it (unchanged when the replay is not sealed)."""
    return otel_context.set_value(SEAL, seal, ctx) if seal is not None else ctx


def suite_refusals_since(seal: Seal | None, seq: int) -> list[Refusal]:
    """The suite seal's refusals after ``seq`` (code without a case's context, and the agent's child
    processes: every case in flight owns them)."""
    if seal is None:
        return []
    seal.collect()
    with seal.lock:
        return [r for r in seal.refusals if r.seq > seq]


def model_endpoint() -> str | None:
    """The endpoint of the model SDK client's request the calling code is inside (a policy's
    ``model_endpoint``, asked only where a connection would be refused)."""
    return seam.model_endpoint(otel_context.get_current())


def last_seq() -> int:
    return _seq


def current() -> Seal | None:
    """The suite's seal that code without a case's context meets now (None: the process is not sealed)."""
    return _suites[-1] if _suites else None
