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
suite's seal, which allows only what every case may (the config's hosts and commands), and whose
refusals fail every case then in flight. A forked child inherits the hook and the seal with the
process. Telemetry the OpenTelemetry SDK exports (its processors export with instrumentation
suppressed) passes: replay spans are marked and ``harvester serve`` drops them.

A connection to an address is allowed when the address is allowed, or when it came from looking up
an allowed name: ``socket.getaddrinfo`` is wrapped to remember which name each address came from,
which is also how a refusal names the host rather than its address. An address found some other way
(a resolver outside Python) is refused, and named by its address: the seal fails closed.

The hook is installed once, by the first sealed replay (an audit hook cannot be removed); outside a
replay it costs one dict lookup per audited event and decides nothing.
"""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY

from ..errors import Sealed
from ..report import MAX_NO_FIXTURE_CALLS, CheckResult
from ._policy import Policy, command_line, shell_words

__all__ = [
    "MAX_REFUSALS",
    "SEAL",
    "Refusal",
    "Seal",
    "install",
    "last_seq",
    "sealed_check",
    "sealing",
    "suite_refusals_since",
    "within",
]

SEAL = otel_context.create_key("harvester.seal")
MAX_REFUSALS = 100  # kept per seal (all are counted)
_MAX_RESOLVED = 4096  # addresses remembered with the name they were looked up by


class Refusal(NamedTuple):
    """One thing the seal refused: ``connect`` to a host or ``start`` of a command, and the call in flight."""

    seq: int
    what: str  # "connect" | "start"
    target: str  # "api.stripe.com:443", "unix:/var/run/docker.sock", "curl -X POST ..."
    during: str | None  # the tool call (or span) in flight, when the context says
    why: str

    def summary(self) -> str:
        during = f" during {self.during}" if self.during else ""
        return f"{self.what} {self.target}{during}: {self.why}"


class Seal:
    """One case-trial's seal (or the suite's): what it allows, and what it refused."""

    __slots__ = ("lock", "policy", "refused", "refusals")

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.refusals: list[Refusal] = []  # the first MAX_REFUSALS
        self.refused = 0
        self.lock = threading.Lock()

    def refuse(self, what: str, target: str, why: str) -> None:
        """Remember the refusal, then raise it into the code that tried."""
        global _seq
        with _seq_lock:
            _seq += 1
            seq = _seq
        with self.lock:
            self.refused += 1
            if len(self.refusals) < MAX_REFUSALS:
                self.refusals.append(Refusal(seq, what, target, _in_flight(), why))
        raise Sealed(f"harvester replay sealed {what} {target}: {why}")


_seq = 0  # refusals ever made in this process: a case owns the suite seal's refusals after its start
_seq_lock = threading.Lock()
_suites: list[Seal] = []  # the seals of the sealed replays running now (the last one is current)
_resolved: collections.OrderedDict[tuple[str, int], str] = collections.OrderedDict()
_resolved_lock = threading.Lock()
_installed = False
_install_lock = threading.Lock()


def _in_flight() -> str | None:
    """The tool call (or failing that, the span) the refused code ran in: what the refusal names."""
    span = trace.get_current_span()
    attributes = getattr(span, "attributes", None) or {}
    for key in ("gen_ai.tool.name", "tool.name"):
        name = attributes.get(key)
        if isinstance(name, str) and name:
            return name
    name = getattr(span, "name", None)
    return f"span {name!r}" if isinstance(name, str) and name else None


def _current() -> Seal | None:
    seal = otel_context.get_value(SEAL)
    if seal is None and _suites:
        return _suites[-1]
    return seal if isinstance(seal, Seal) else None


def _port(value: Any) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, (str, bytes)) and value.isdigit():
        return int(value)
    return None


def _host_text(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port is not None else shown


_NOT_ALLOWED_HOST = "not a model host of this case's recording; allow it with replay.allow_hosts (or --allow-host)"
_NOT_ALLOWED_COMMAND = "not in replay.allow_commands"


def _lookup(seal: Seal, args: tuple[Any, ...]) -> None:
    """``socket.getaddrinfo(host, port, ...)``: a name the policy does not allow is refused here."""
    host = args[0]
    if isinstance(host, bytes):
        host = host.decode("idna", "replace")
    if not isinstance(host, str) or not host or _is_address(host):
        return  # no name (a server's wildcard) or an address: the connection itself is checked
    port = _port(args[1])
    if not seal.policy.allows_host(host, port):
        seal.refuse("connect", _host_text(host, port), _NOT_ALLOWED_HOST)


def _is_address(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host.split("%", 1)[0])
    except (OSError, ValueError):
        return False
    return True


def _reach(seal: Seal, sock: Any, address: Any) -> None:
    """A connection (or a datagram) to ``address`` from ``sock``: allowed, or refused by name."""
    family = getattr(sock, "family", None)
    if family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple) and len(address) >= 2:
        host, port = str(address[0]), _port(address[1])
        if seal.policy.allows_host(host, port):
            return
        with _resolved_lock:
            name = _resolved.get((host, port or 0))
        if name is not None and seal.policy.allows_host(name, port):
            return
        seal.refuse("connect", _host_text(name or host, port), _NOT_ALLOWED_HOST)
    elif family == getattr(socket, "AF_UNIX", None) and isinstance(address, (str, bytes)):
        path = address.decode("utf-8", "replace") if isinstance(address, bytes) else address
        if not seal.policy.allows_unix(path):
            seal.refuse("connect", f"unix:{path}", "a local socket; allow it with replay.allow_hosts unix:PATH")


# The standard library's own probes, which run a tool to learn about the machine, not to act on the world:
# ``ctypes.util.find_library`` (ldconfig, gcc, ld: trio runs it at import), ``platform``, ``uuid``.
_PROBES = frozenset(
    os.path.join(os.path.dirname(os.__file__), name) for name in ("ctypes/util.py", "platform.py", "uuid.py")
)


def _probing() -> bool:
    frame = sys._getframe(2)
    for _ in range(40):
        if frame is None:
            return False
        if frame.f_code.co_filename in _PROBES:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _start(seal: Seal, words: list[str] | None, shown: str) -> None:
    if not seal.policy.allows_command(words) and not _probing():
        why = _NOT_ALLOWED_COMMAND if words is not None else "a shell line of more than one plain command"
        seal.refuse("start", shown if len(shown) <= 120 else shown[:117] + "...", why)


def _spawn(seal: Seal, program: Any, argv: Any) -> None:
    words = command_line(program, argv)
    _start(seal, words, " ".join(words) if words else str(argv))


_CONNECTING: dict[str, Callable[[Seal, tuple[Any, ...]], None]] = {
    "socket.getaddrinfo": _lookup,
    "socket.connect": lambda seal, a: _reach(seal, a[0], a[1]),
    "socket.sendto": lambda seal, a: _reach(seal, a[0], a[1]),
    "socket.sendmsg": lambda seal, a: _reach(seal, a[0], a[1]) if a[1] is not None else None,
}
_STARTING: dict[str, Callable[[Seal, tuple[Any, ...]], None]] = {
    "subprocess.Popen": lambda seal, a: _spawn(seal, a[0], a[1]),
    "os.system": lambda seal, a: _start(seal, shell_words(str(a[0])), str(a[0])),
    "os.exec": lambda seal, a: _spawn(seal, a[0], a[1]),
    "os.posix_spawn": lambda seal, a: _spawn(seal, a[0], a[1]),
    "os.spawn": lambda seal, a: _spawn(seal, a[1], a[2]),
}
_WATCHED = {**_CONNECTING, **_STARTING}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    check = _WATCHED.get(event)
    if check is None:
        return
    seal = _current()
    if seal is None:
        return
    if event in _CONNECTING and otel_context.get_value(_SUPPRESS_INSTRUMENTATION_KEY):
        return  # the OpenTelemetry SDK exporting telemetry (its processors suppress instrumentation)
    check(seal, args)


def _remembering(lookup: Callable[..., Any]) -> Callable[..., Any]:
    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        found = lookup(host, port, *args, **kwargs)
        if _current() is not None and isinstance(host, (str, bytes)) and found:
            name = host.decode("idna", "replace") if isinstance(host, bytes) else host
            with _resolved_lock:
                for _family, _type, _proto, _canon, address in found:
                    key = (str(address[0]), int(address[1]) if len(address) > 1 else 0)
                    _resolved[key] = name
                    _resolved.move_to_end(key)
                while len(_resolved) > _MAX_RESOLVED:
                    _resolved.popitem(last=False)
        return found

    getaddrinfo.__wrapped__ = lookup  # type: ignore[attr-defined]
    getaddrinfo.__doc__ = lookup.__doc__
    return getaddrinfo


def install() -> None:
    """Install the audit hook and the name memory, once per process."""
    global _installed
    with _install_lock:
        if _installed:
            return
        socket.getaddrinfo = _remembering(socket.getaddrinfo)
        sys.addaudithook(_audit)
        _installed = True


@contextlib.contextmanager
def sealing(policy: Policy) -> Iterator[Seal]:
    """Seal the process for the duration of a replay; yields the suite's seal (for code without a case)."""
    install()
    seal = Seal(policy)
    _suites.append(seal)
    try:
        yield seal
    finally:
        _suites.remove(seal)


def within(ctx: otel_context.Context, seal: Seal | None) -> otel_context.Context:
    """``ctx`` with the case's seal in it (unchanged when the replay is not sealed)."""
    return otel_context.set_value(SEAL, seal, ctx) if seal is not None else ctx


def suite_refusals_since(seal: Seal | None, seq: int) -> list[Refusal]:
    """The suite seal's refusals after ``seq`` (code without a case's context: every case in flight owns them)."""
    if seal is None:
        return []
    with seal.lock:
        return [r for r in seal.refusals if r.seq > seq]


def last_seq() -> int:
    return _seq


def sealed_check(refusals: list[Refusal], total: int) -> CheckResult | None:
    """The failed ``sealed`` check naming what the seal refused in a case (None when it refused nothing);
    ``total`` counts every refusal, kept or not."""
    if not refusals:
        return None
    shown = "; ".join(r.summary() for r in refusals[:MAX_NO_FIXTURE_CALLS])
    more = f"; and {total - min(len(refusals), MAX_NO_FIXTURE_CALLS)} more" if total > MAX_NO_FIXTURE_CALLS else ""
    return CheckResult(name="sealed", passed=False, detail=f"refused {shown}{more}")
