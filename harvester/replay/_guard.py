"""The seal's audit checks: which audited events reach outside the process, and whether a policy allows them.

Standard library only, importing nothing of harvester: a Python process that a sealed replay starts
loads this file by its path (``_child/sitecustomize.py``) and seals itself with the same checks.

- ``socket.getaddrinfo``, ``gethostbyname(_ex)``: a name the policy does not allow is refused at its
  lookup (the query itself leaves the process); an address is left to the connection, and ``localhost``
  or the machine's own name is answered from the machine. ``gethostbyaddr``, ``getnameinfo``: an
  address's name is a query too, unless the address is this machine's, allowed, or an allowed name's.
- ``socket.connect`` (and ``connect_ex``), ``sendto``, ``sendmsg``: an address is allowed when the policy
  allows it, or the name it was looked up by (``getaddrinfo`` is wrapped to remember it). A local
  socket is allowed by its path, or when it is multiprocessing's own; a socket of any other family but
  netlink (the kernel) is refused. The endpoint of the model SDK client's request the calling code is
  inside passes where the policy lets it (``allows_model_call``).
- ``syslog.syslog`` (and ``openlog`` with ``LOG_NDELAY``) sends to ``/dev/log`` from C: that connection.
- ``subprocess.Popen``, ``os.system``, ``os.exec*``, ``os.posix_spawn``, ``os.spawn*``, and
  ``_posixsubprocess.fork_exec`` called by anything but ``subprocess`` (``FORK_EXEC``, raised by
  ``Guard.forking``, which also gives an environment of the caller's own the seal): ``_starts``.
"""

from __future__ import annotations

import _socket
import functools
import importlib
import operator
import os
import socket
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

try:  # in a sealed child (``_child``) this module and ``_starts`` are loaded by their paths
    from . import _starts
except ImportError:
    _starts = importlib.import_module("_harvester_seal_starts")

__all__ = [
    "CHILD_ENV",
    "FORK_EXEC",
    "KINDS",
    "MAX_RESOLVED",
    "PROBE",
    "SYSLOG_SOCKET",
    "COMMON_FAMILIES",
    "CSocket",
    "Guard",
    "Refuse",
    "resolved",
]

Refuse = Callable[[str, str, str], None]  # (what, target, why): records the refusal, then raises
# The policy in force here and its refusal, or None; asked with True for a connection (telemetry's pass).
Current = Callable[[bool], "tuple[Any, Refuse] | None"]

MAX_RESOLVED = 4096  # addresses remembered with the name they were looked up by
CHILD_ENV = _starts.CHILD_ENV
# Address -> the name it was looked up by; a plain dict (a write is atomic), emptied when full.
resolved: dict[tuple[str, int], str] = {}
_NOT_ALLOWED_HOST = "not a model host of this case's recording; allow it with replay.allow_hosts (or --allow-host)"
_INET = frozenset({int(socket.AF_INET), int(socket.AF_INET6)})
try:  # a socket's family as the int it is (``socket.family`` makes an enum on every read)
    _family: Callable[[Any], Any] = _socket.socket.family.__get__
except AttributeError:  # pragma: no cover - an interpreter whose socket type has no such member
    _family = operator.attrgetter("family")


class CSocket(NamedTuple):
    """A socket C code connects past the ``socket`` module (``_libc``): what the checks read of it."""

    family: int
    fd: int


PROBE = "harvester.seal.probe"  # raised once a hook is added: it says it is called
FORK_EXEC = "harvester.seal.fork_exec"  # a process start no standard event tells (``Guard.forking``)
_LOOKUPS = ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo")
_SYSLOG = ("syslog.openlog", "syslog.syslog")  # the ``syslog`` module reaches its daemon from C, no socket event
_STARTS = ("subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.fork", "os.forkpty", FORK_EXEC)
# What each watched event is, as the C hook (``_hook.c``) tells them apart: 1 a name lookup, 2 a connection
# (or datagram), 3 a process start, 4 the probe.
KINDS = {
    **dict.fromkeys(_LOOKUPS, 1),
    **dict.fromkeys(("socket.connect", "socket.sendto", "socket.sendmsg", *_SYSLOG), 2),
    **dict.fromkeys(_STARTS, 3),
    PROBE: 4,
    "socket.__new__": 5,
}
_START = 3
# Sockets made without a check: what they reach is checked as they connect or send (netlink and AF_ALG reach
# the kernel only). Any other family (a raw packet socket, CAN, vsock) sends with ``send()`` once bound,
# past every other event: refused as it is made.
_FAMILIES = ("AF_INET", "AF_INET6", "AF_UNIX", "AF_NETLINK", "AF_ALG")
COMMON_FAMILIES = frozenset({-1, *(int(getattr(socket, f)) for f in _FAMILIES if hasattr(socket, f))})
SYSLOG_SOCKET = "/var/run/syslog" if sys.platform == "darwin" else "/dev/log"  # the C library's _PATH_LOG
_NDELAY = 0x08  # syslog's LOG_NDELAY: openlog connects at once
_LOCAL_FAMILIES = frozenset(int(f) for f in (getattr(socket, "AF_NETLINK", None),) if f is not None)


class Guard:
    """An audit hook's checks against the policy ``current(reaching)`` gives in the calling code (None:
    unsealed there)."""

    __slots__ = ("_checks", "_current", "audit", "live", "started")

    def __init__(self, current: Current) -> None:
        self._current = current
        self.started = False  # a process started (or forked) while sealed: its refusals come back by a log
        self.live = False  # the hook saw the probe
        by_event: dict[str, Callable[[Any, Refuse, tuple[Any, ...]], None]] = {
            "socket.getaddrinfo": _lookup,
            "socket.gethostbyname": _lookup_by_name,
            "socket.gethostbyaddr": lambda p, r, a: _lookup_by_address(p, r, a[0]),
            "socket.getnameinfo": lambda p, r, a: _lookup_by_address(p, r, *a[0][:2]) if _pair(a[0]) else None,
            "socket.connect": _reach,
            "socket.sendto": _reach,
            "socket.sendmsg": _reach,
            "syslog.openlog": lambda p, r, a: _syslog(p, r) if _int(a[1]) & _NDELAY else None,  # connects now
            "syslog.syslog": lambda p, r, a: _syslog(p, r),
            "subprocess.Popen": lambda p, r, a: _starts.spawn(p, r, a[0], a[1], given=a[3]),  # see ``forking``
            "os.exec": lambda p, r, a: _starts.spawn(p, r, a[0], a[1], a[2]),
            "os.posix_spawn": lambda p, r, a: _starts.spawn(p, r, a[0], a[1], a[2]),
            "os.spawn": lambda p, r, a: _starts.spawn(p, r, a[1], a[2], a[3]),
            "os.system": lambda p, r, a: _starts.shell(p, r, a[0]),
            "os.fork": lambda p, r, a: None,
            "os.forkpty": lambda p, r, a: None,  # a child that inherits the seal (``pty.fork``, ``pty.spawn``)
            FORK_EXEC: _starts.fork_exec,
            PROBE: _probe,
            "socket.__new__": _new_socket,
        }
        # event -> (its check, whether it reaches out over a socket rather than starts a process)
        self._checks = {event: (by_event[event], kind != _START) for event, kind in KINDS.items()}

        self.audit = self._hook()

    def _hook(self) -> Callable[[str, tuple[Any, ...]], None]:
        """The audit hook: a closure over bound lookups, so an event the seal does not watch costs one call
        and one dict lookup (every audited event of the process pays it), and one it watches a context read
        and, for a connection the policy allowed before, a dict lookup."""
        checks, current = self._checks.get, self._current

        def audit(event: str, args: tuple[Any, ...]) -> None:
            found = checks(event)
            if found is None:
                return
            check, reaching = found
            if check is _probe:
                self.live = True
                return
            here = current(reaching)
            if here is None:
                return
            check(here[0], here[1], args)
            if not reaching:
                self.started = True  # not refused: a child runs, sealed, and may write to the log

        return audit

    def add(self) -> None:
        """Add the hook to the process's and check that it is called: a hook already added may veto a
        new one (``sys.addaudithook`` then returns as if it had added it), which would seal nothing."""
        sys.addaudithook(self.audit)
        sys.audit(PROBE)
        if not self.live:
            raise RuntimeError("the seal's audit hook is not called: another audit hook refused it")

    @staticmethod
    def forking(fork_exec: Callable[..., Any]) -> Callable[..., Any]:
        """``_posixsubprocess.fork_exec`` that raises ``FORK_EXEC`` first (no standard audited event tells
        a process multiprocessing starts; ``subprocess`` raised ``subprocess.Popen`` already) and gives an
        environment of the caller's own the seal (``subprocess`` builds that list afresh from its ``env``:
        the caller's mapping is never changed)."""

        def checked(*args: Any, **kwargs: Any) -> Any:
            if len(args) >= 6:
                caller = sys._getframe(1).f_code.co_filename
                own = False
                if caller != _starts.SUBPROCESS:
                    own = caller == _starts.MP_UTIL and _starts.own_worker(args[1], args[0])
                    sys.audit(FORK_EXEC, args[1], args[0], args[4], args[5], own)
                env = _starts.with_seal(args[5], own) if isinstance(args[5], list) else _starts.sealed_environ(own)
                if env is not None:
                    args = (*args[:5], env, *args[6:])
            return fork_exec(*args, **kwargs)

        checked.__wrapped__ = fork_exec  # type: ignore[attr-defined]
        checked.__doc__ = fork_exec.__doc__
        return checked

    @staticmethod
    def resolving(socket_class: type, native: Any = None) -> None:
        """``connect``, ``connect_ex``, ``sendto``, ``sendmsg`` and ``bind`` of ``socket_class`` that raise
        ``socket.getaddrinfo`` for a name (text, bytes or a bytearray) before CPython looks it up, which it
        does before the event the seal checks (``bind`` raises none): the query left, and a name that does
        not resolve was never refused. ``native``: the C hook's module, whose ``resolving`` costs an
        address a type check (the Python frame here cost an allowed connection microseconds)."""
        for name in ("connect", "connect_ex", "sendto", "sendmsg", "bind"):
            method = getattr(socket_class, name)
            if getattr(method, "__wrapped__", None) is not None:
                continue  # once
            if native is not None:
                setattr(socket_class, name, native.resolving(method, _name_given))
                continue

            def looking_up(self: Any, *args: Any, _method: Callable[..., Any] = method) -> Any:
                address: Any = args[-1] if args else None  # connect(address); sendto(data[, flags], address)
                if type(address) is tuple and len(address) >= 2 and isinstance(address[0], (str, bytes, bytearray)):
                    _name_given(self, address)
                return _method(self, *args)

            looking_up.__wrapped__ = method  # type: ignore[attr-defined]
            looking_up.__name__, looking_up.__doc__ = method.__name__, method.__doc__
            setattr(socket_class, name, looking_up)

    def remembering(self, lookup: Callable[..., Any]) -> Callable[..., Any]:
        """``socket.getaddrinfo`` that remembers which name each address came from (installed by the first
        sealed replay; a bounded dict write per address, so it asks nothing of the context)."""

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            found = lookup(host, port, *args, **kwargs)
            if isinstance(host, (str, bytes)) and found:
                name = _ascii(host) if isinstance(host, bytes) else host
                if _is_address(name):
                    return found  # an address looked up is no name: the name it came from stays
                if len(resolved) > MAX_RESOLVED:
                    resolved.clear()  # a lookup is remembered until then: a connection follows it at once
                for entry in found:  # (family, type, proto, canonname, (address, port, ...))
                    resolved[entry[4][:2]] = name
            return found

        getaddrinfo.__wrapped__ = lookup  # type: ignore[attr-defined]
        getaddrinfo.__doc__ = lookup.__doc__
        return getaddrinfo


def _name_given(sock: Any, address: tuple[Any, ...]) -> None:
    """A name given to a socket method (``Guard.resolving``): its lookup put to the seal first."""
    host = address[0] if isinstance(address[0], str) else _ascii(address[0])
    family = _family(sock)
    if host and family in _INET and not _is_address(host):
        sys.audit("socket.getaddrinfo", host, address[1], family, 0, 0, 0)


def _probe(policy: Any, refuse: Refuse, args: tuple[Any, ...]) -> None:
    """The probe's check: never called (the hook marks itself live instead)."""


def _port(value: Any) -> int | None:
    if isinstance(value, int):
        return int(value)  # an int, not a subclass of one: what the C hook compares
    if isinstance(value, (str, bytes)) and value.isdigit():
        return int(value)
    return None


def _host_text(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port is not None else shown


@functools.lru_cache(maxsize=1024)
def _is_address(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host.split("%", 1)[0])
    except (OSError, ValueError):
        return False
    return True


def _lookup(policy: Any, refuse: Refuse, args: tuple[Any, ...]) -> None:
    host, port = args[0], args[1]
    if type(host) is str and type(port) is int and policy.allowed.get((host, port)):
        return  # looked up and allowed before: one dict lookup
    if isinstance(host, (bytes, bytearray)):
        host = _ascii(host)
    if not isinstance(host, str) or not host or _own_name(host):
        return  # no name (a server's wildcard), or the machine's own: answered from the machine
    port = _port(port)
    if policy.allows_host(host, port) or _is_address(host):  # an address: the connection is checked
        return
    if not policy.allows_model_call(host, port):
        refuse("connect to", _host_text(host, port), _NOT_ALLOWED_HOST)


def _ascii(name: bytes | bytearray) -> str:
    """A name given as bytes: IDNA-encoded (anyio's lookups pass them), so ASCII by definition (the idna
    codec has no "replace" handler: decoding with it raised inside every such lookup)."""
    return bytes(name).decode("ascii", "replace")


def _own_name(host: str) -> bool:
    """``localhost`` or the machine's own name (what ``socket.getfqdn()`` asks): answered from the machine,
    and the connection that may follow is checked by its address."""
    return host.lower().rstrip(".") in ("localhost", "ip6-localhost", "ip6-loopback", socket.gethostname().lower())


def _lookup_by_name(policy: Any, refuse: Refuse, args: tuple[Any, ...]) -> None:
    """``gethostbyname(_ex)``: one name, no port (an address is answered without a query)."""
    host = _ascii(args[0]) if isinstance(args[0], (bytes, bytearray)) else args[0]
    if isinstance(host, str) and not _is_address(host):
        _lookup(policy, refuse, (host, None))


def _lookup_by_address(policy: Any, refuse: Refuse, address: Any, port: Any = None) -> None:
    """``gethostbyaddr``, ``getnameinfo``: an address's name, a query leaving the process unless the
    address is this machine's, one the policy allows, or one an allowed name was looked up to."""
    if isinstance(address, (bytes, bytearray)):
        address = _ascii(address)
    if not isinstance(address, str) or not _is_address(address):
        if isinstance(address, str) and address:
            _lookup_by_name(policy, refuse, (address,))  # gethostbyaddr looks a name up first
        return
    if _loopback(address) or policy.allows_host(address, None):
        return
    name = resolved.get((address, port)) if type(port) is int else None
    if name is None and port is None:
        name = next((n for (a, _), n in list(resolved.items()) if a == address), None)
    if name is None or not policy.allows_host(name, None):
        refuse("look up", address, _NOT_ALLOWED_HOST)


def _loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("::1", "0.0.0.0", "::")


def _pair(sockaddr: Any) -> bool:
    return isinstance(sockaddr, tuple) and len(sockaddr) >= 2


def _reach(policy: Any, refuse: Refuse, args: tuple[Any, ...]) -> None:
    """A connection (or a datagram) from ``args[0]`` to ``args[1]``: allowed, or refused by name."""
    sock, address = args[0], args[1]
    try:
        family: Any = _family(sock)
    except (TypeError, AttributeError):
        family = getattr(sock, "family", None)
    if family in _INET and isinstance(address, tuple) and len(address) >= 2:
        try:
            name = resolved.get(address[:2])  # the name this address was looked up by, if it was
            key: Any = (address, name)  # all the answer depends on: a connection allowed before is one lookup
            allowed = policy.allowed.get(key)
        except TypeError:  # a host given as a bytearray
            name, key, allowed = None, None, None
        host = _ascii(address[0]) if isinstance(address[0], (bytes, bytearray)) else str(address[0])
        if allowed is None:
            port = _port(address[1])
            allowed = policy.allows_host(host, port) or (name is not None and policy.allows_host(name, port))
            if not allowed and name is None and (not host or _is_address(host) and _loopback(host)):  # libcurl
                allowed = policy.allows_host("localhost", port)
            if key is not None:
                policy.remember(key, allowed)
        if not allowed and not _model_call(policy, name, host, _port(address[1])):
            refuse("connect to", _host_text(name or host, _port(address[1])), _NOT_ALLOWED_HOST)
    elif address is None:
        return  # ``sendmsg`` on a connected socket: its connection was checked
    elif family in _INET:  # an address too short to read (C code's): what cannot be read is not allowed
        refuse("connect to", f"{address!r} (socket family {family})", "an address the seal cannot read")
    elif family == getattr(socket, "AF_UNIX", None):
        try:  # str, or any bytes-like path (a bytearray, a memoryview)
            path = address if isinstance(address, str) else os.fsdecode(bytes(address))
        except (TypeError, ValueError):
            refuse("connect to", f"unix:{address!r}", "a local socket address the seal cannot read")
        if not policy.allows_unix(path) and not _multiprocessing_own(path):
            refuse("connect to", f"unix:{path}", "a local socket; allow it with replay.allow_hosts unix:PATH")
    elif family not in _INET and family not in _LOCAL_FAMILIES:
        refuse("connect to", f"{address!r} (socket family {family})", "not a network the seal allows")


def _new_socket(policy: Any, refuse: Refuse, args: tuple[Any, ...]) -> None:
    """``socket.__new__(sock, family, type, proto)``: a family whose sends carry no address the seal
    reads (``AF_PACKET`` bound to an interface sends frames with ``send()``) is refused as it is made."""
    family = args[1] if len(args) > 1 else -1
    if family not in COMMON_FAMILIES:
        refuse("open a socket of family", str(family), "not a network the seal allows")


def _syslog(policy: Any, refuse: Refuse) -> None:
    """A message of the ``syslog`` module (or its ``openlog`` with ``LOG_NDELAY``): a connection to the
    local syslog daemon's socket, which C makes past every socket event."""
    if not policy.allows_unix(SYSLOG_SOCKET):
        why = f"a local socket; allow it with replay.allow_hosts unix:{SYSLOG_SOCKET}"
        refuse("connect to", f"unix:{SYSLOG_SOCKET}", why)


def _int(value: Any) -> int:
    return value if type(value) is int else 0


def _model_call(policy: Any, name: str | None, address: str, port: int | None) -> bool:
    """The connection is the model SDK client's request to its own endpoint, by name or by address."""
    return policy.allows_model_call(address, port) or (name is not None and policy.allows_model_call(name, port))


def _multiprocessing_own(path: str) -> bool:
    """A socket in this process's multiprocessing folder (a forkserver's, a manager's), not a link to elsewhere."""
    process = sys.modules.get("multiprocessing.process")
    folder = process.current_process()._config.get("tempdir") if process is not None else None
    if not folder or os.path.dirname(path) != folder:
        return False
    return os.path.dirname(os.path.realpath(path)) == os.path.realpath(folder)  # not a link to elsewhere
