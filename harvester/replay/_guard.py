"""The seal's audit checks: which audited events reach outside the process, and whether a policy allows them.

Standard library only, importing nothing of harvester: a Python process that a sealed replay starts
loads this file by its path (``_child/sitecustomize.py``) and seals itself with the same checks.

- ``socket.getaddrinfo``, ``gethostbyname(_ex)``, ``gethostbyaddr``, ``getnameinfo``: a name the policy
  does not allow is refused at its lookup (a host that does not resolve offline was still one the agent
  tried to reach; the query itself leaves the process); an address is left to the connection, and the
  machine's own name (``socket.getfqdn()``) is not the outside world.
- ``socket.connect`` (and ``connect_ex``), ``sendto``, ``sendmsg``: an address is allowed when the policy
  allows it, or the name it was looked up by. ``getaddrinfo`` is wrapped to remember which name each
  address came from; one found another way (a resolver outside Python) is refused by its address. A
  local socket is allowed by its path, or when it is multiprocessing's own (its forkserver, a manager);
  a socket of any other family but netlink (the kernel) is refused.
- ``subprocess.Popen``, ``os.system``, ``os.exec*``, ``os.posix_spawn``, ``os.spawn*``, and
  ``_posixsubprocess.fork_exec`` called by anything but ``subprocess`` (``FORK_EXEC``, raised by the
  wrapper ``Guard.forking`` puts around it): the command line must begin with an allowed command; the
  standard library's own probes of the machine (``ctypes.util.find_library`` runs ldconfig and gcc,
  trio does at import) and harvester's capture process are not actions, and multiprocessing's workers
  of this very interpreter are the process itself. A process that starts gets the seal in its
  environment even when the caller gave it an environment of its own (an MCP client passes only
  ``PATH``, ``HOME`` and a few more): a Python child seals itself with it (``_child``).
"""

from __future__ import annotations

import _socket
import functools
import json
import operator
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["CHILD_ENV", "FORK_EXEC", "KINDS", "MAX_RESOLVED", "PROBE", "Guard", "Refuse", "resolved"]

Refuse = Callable[[str, str, str], None]  # (what, target, why): records the refusal, then raises
# The policy in force here and its refusal, or None; asked with True for a connection, which code that
# exports telemetry makes unsealed.
Current = Callable[[bool], "tuple[Any, Refuse] | None"]

MAX_RESOLVED = 4096  # addresses remembered with the name they were looked up by
_NOT_ALLOWED_HOST = "not a model host of this case's recording; allow it with replay.allow_hosts (or --allow-host)"
# Starts that are not the agent's actions: the standard library's probes of the machine, and harvester's own
# capture process (an app that installs capture at import starts it; it writes to the trace store only).
_PROBES = frozenset(
    (
        *(os.path.join(os.path.dirname(os.__file__), name) for name in ("ctypes/util.py", "platform.py", "uuid.py")),
        os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "intake", "_capture_process.py"),
    )
)
# Address -> the name it was looked up by; a plain dict (a write is atomic), emptied when full.
resolved: dict[tuple[str, int], str] = {}
_INET = frozenset({int(socket.AF_INET), int(socket.AF_INET6)})
try:  # a socket's family as the int it is (``socket.family`` makes an enum on every read)
    _family: Callable[[Any], Any] = _socket.socket.family.__get__
except AttributeError:  # pragma: no cover - an interpreter whose socket type has no such member
    _family = operator.attrgetter("family")


PROBE = "harvester.seal.probe"  # raised once a hook is added: it says it is called
FORK_EXEC = "harvester.seal.fork_exec"  # a process start no standard event tells (``Guard.forking``)
CHILD_ENV = "HARVESTER_SEAL"  # the policy a Python child of a sealed replay seals itself with (``_child``)
_LOOKUPS = ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo")
_STARTS = ("subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.fork", FORK_EXEC)
# What each watched event is, as the C hook (``_hook.c``) tells them apart: 1 a name lookup, 2 a connection
# (or datagram), 3 a process start, 4 the probe.
KINDS = {
    **dict.fromkeys(_LOOKUPS, 1),
    **dict.fromkeys(("socket.connect", "socket.sendto", "socket.sendmsg"), 2),
    **dict.fromkeys(_STARTS, 3),
    PROBE: 4,
}
_START = 3
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
            "socket.gethostbyaddr": _lookup_by_name,
            "socket.getnameinfo": lambda p, r, a: _lookup(p, r, a[0]) if isinstance(a[0], tuple) else None,
            "socket.connect": _reach,
            "socket.sendto": _reach,
            "socket.sendmsg": _reach,
            "subprocess.Popen": lambda p, r, a: _spawn(p, r, a[0], a[1], a[3]),
            "os.exec": lambda p, r, a: _spawn(p, r, a[0], a[1], a[2]),
            "os.posix_spawn": lambda p, r, a: _spawn(p, r, a[0], a[1], a[2]),
            "os.spawn": lambda p, r, a: _spawn(p, r, a[1], a[2], a[3]),
            "os.system": lambda p, r, a: _shell(p, r, a[0]),
            "os.fork": lambda p, r, a: None,
            FORK_EXEC: _fork_exec,
            PROBE: _probe,
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
        """``_posixsubprocess.fork_exec`` raising ``FORK_EXEC`` first: no standard audited event tells a
        process it starts (multiprocessing's spawn and forkserver start theirs with it; ``subprocess``
        raises ``subprocess.Popen`` itself and binds the original at import)."""

        def checked(*args: Any, **kwargs: Any) -> Any:
            caller = sys._getframe(1).f_code.co_filename
            if caller != _SUBPROCESS and len(args) >= 6:
                own = caller == _MP_UTIL and _same_program(args[1])
                sys.audit(FORK_EXEC, args[1], args[0], args[4], args[5], own)
            return fork_exec(*args, **kwargs)

        checked.__wrapped__ = fork_exec  # type: ignore[attr-defined]
        checked.__doc__ = fork_exec.__doc__
        return checked

    def remembering(self, lookup: Callable[..., Any]) -> Callable[..., Any]:
        """``socket.getaddrinfo`` that remembers which name each address came from (installed by the first
        sealed replay; a bounded dict write per address, so it asks nothing of the context)."""

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            found = lookup(host, port, *args, **kwargs)
            if isinstance(host, (str, bytes)) and found:
                # bytes are an IDNA-encoded name (anyio's lookups pass them), ASCII by definition; the idna
                # codec has no "replace" error handler and raised inside every such lookup
                name = host.decode("ascii", "replace") if isinstance(host, bytes) else host
                if len(resolved) > MAX_RESOLVED:
                    resolved.clear()  # a lookup is remembered until then: a connection follows it at once
                for entry in found:  # (family, type, proto, canonname, (address, port, ...))
                    resolved[entry[4][:2]] = name
            return found

        getaddrinfo.__wrapped__ = lookup  # type: ignore[attr-defined]
        getaddrinfo.__doc__ = lookup.__doc__
        return getaddrinfo


_SUBPROCESS = os.path.join(os.path.dirname(os.__file__), "subprocess.py")
_MP_UTIL = os.path.join(os.path.dirname(os.__file__), "multiprocessing", "util.py")


def _same_program(executables: Any) -> bool:
    """``fork_exec``'s program is this interpreter (multiprocessing's default executable)."""
    try:
        return os.path.realpath(os.fsdecode(executables[0])) == os.path.realpath(sys.executable)
    except (TypeError, IndexError, ValueError):
        return False


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
    if isinstance(host, bytes):
        host = host.decode("idna", "replace")
    if not isinstance(host, str) or not host:
        return  # no name: a server's wildcard
    port = _port(port)
    if not policy.allows_host(host, port) and not _is_address(host):  # an address: the connection is checked
        refuse("connect to", _host_text(host, port), _NOT_ALLOWED_HOST)


def _lookup_by_name(policy: Any, refuse: Refuse, args: tuple[Any, ...]) -> None:
    """``gethostbyname(_ex)``/``gethostbyaddr``: one name or address, no port; the machine's own name
    (what ``socket.getfqdn()`` asks) answers from the machine."""
    host = args[0]
    if isinstance(host, (bytes, bytearray)):
        host = bytes(host).decode("idna", "replace")
    if isinstance(host, str) and host.lower() not in ("localhost", socket.gethostname().lower()):
        if _is_address(host):
            if not _loopback(host) and not policy.allows_host(host, None):  # a reverse lookup is a query
                refuse("look up", host, _NOT_ALLOWED_HOST)
        else:
            _lookup(policy, refuse, (host, None))


def _loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("::1", "0.0.0.0", "::")


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
        if allowed is None:
            host, port = str(address[0]), _port(address[1])
            allowed = policy.allows_host(host, port) or (name is not None and policy.allows_host(name, port))
            if key is not None:
                policy.remember(key, allowed)
        if not allowed:
            refuse("connect to", _host_text(name or str(address[0]), _port(address[1])), _NOT_ALLOWED_HOST)
    elif address is None:
        return  # ``sendmsg`` on a connected socket: its connection was checked
    elif family == getattr(socket, "AF_UNIX", None):
        try:  # str, or any bytes-like path (a bytearray, a memoryview)
            path = address if isinstance(address, str) else os.fsdecode(bytes(address))
        except (TypeError, ValueError):
            refuse("connect to", f"unix:{address!r}", "a local socket address the seal cannot read")
        if not policy.allows_unix(path) and not _multiprocessing_own(path):
            refuse("connect to", f"unix:{path}", "a local socket; allow it with replay.allow_hosts unix:PATH")
    elif family not in _INET and family not in _LOCAL_FAMILIES:
        refuse("connect to", f"{address!r} (socket family {family})", "not a network the seal allows")


def _multiprocessing_own(path: str) -> bool:
    """A socket in this process's multiprocessing folder: its forkserver's or a manager's, not the world."""
    process = sys.modules.get("multiprocessing.process")
    folder = process.current_process()._config.get("tempdir") if process is not None else None
    return bool(folder) and os.path.dirname(path) == folder


def _probing() -> bool:
    """Called from the standard library's own probes of the machine, or harvester's capture process
    (within 40 frames)."""
    frame: Any = sys._getframe(3)
    for _ in range(40):
        if frame is None:
            return False
        if frame.f_code.co_filename in _PROBES:
            return True
        frame = frame.f_back
    return False


def _start(policy: Any, refuse: Refuse, words: list[str] | None, shown: str, env: Any = None) -> None:
    shown = shown if len(shown) <= 120 else shown[:117] + "..."
    if not policy.allows_command(words) and not _probing():
        why = "not in replay.allow_commands" if words is not None else "a shell line of more than one plain command"
        refuse("start", shown, why)
    if not _pass_seal(env):
        refuse("start", shown, "its environment is not one the seal can pass itself into (give a dict)")


def _spawn(policy: Any, refuse: Refuse, program: Any, argv: Any, env: Any) -> None:
    words = policy.command_line(program, argv)
    _start(policy, refuse, words, " ".join(words) if words else str(argv), env)


def _fork_exec(policy: Any, refuse: Refuse, args: tuple[Any, ...]) -> None:
    """``FORK_EXEC``'s (executables, argv, cwd, env, own): a multiprocessing worker of this interpreter
    (``own``) is the process itself, sealed with it; anything else is a command like the rest."""
    executables, argv, _, env, own = args
    if own:
        if not _pass_seal(env):
            refuse("start", str(argv)[:120], "its environment is not one the seal can pass itself into")
        return
    _spawn(policy, refuse, executables[0] if executables else None, argv, env)


def _pass_seal(env: Any) -> bool:
    """Give a process the seal even when its caller gave it an environment of its own (a dict, or
    ``fork_exec``'s list of ``b"NAME=value"``): a Python child seals itself with it. False when it
    cannot (a mapping that is not a dict); None inherits this process's environment, seal included."""
    setting = os.environ.get(CHILD_ENV)
    if env is None or setting is None:
        return True
    try:
        child_dir = os.path.join(json.loads(setting)["dir"], "_child")
    except (ValueError, KeyError, TypeError):
        return True  # not a replay's setting: nothing of ours to pass
    if isinstance(env, list):
        named = {bytes(e).split(b"=", 1)[0]: i for i, e in enumerate(env) if isinstance(e, (bytes, bytearray))}
        path = env[named[b"PYTHONPATH"]].split(b"=", 1)[1] if b"PYTHONPATH" in named else b""
        for name, value in ((CHILD_ENV.encode(), setting.encode()), (b"PYTHONPATH", _first(child_dir, path))):
            entry = name + b"=" + os.fsencode(value)
            if name in named:
                env[named[name]] = entry
            else:
                env.append(entry)
        return True
    if not isinstance(env, dict):
        return False
    if any(isinstance(k, bytes) for k in env):
        env[CHILD_ENV.encode()] = setting.encode()
        env[b"PYTHONPATH"] = os.fsencode(_first(child_dir, env.get(b"PYTHONPATH", b"")))
    else:
        env[CHILD_ENV] = setting
        env["PYTHONPATH"] = _first(child_dir, env.get("PYTHONPATH", ""))
    return True


def _first(folder: str, path: str | bytes) -> str:
    """``folder`` first on the search path ``path`` (once)."""
    rest = [p for p in os.fsdecode(path).split(os.pathsep) if p and p != folder]
    return os.pathsep.join([folder, *rest])


def _shell(policy: Any, refuse: Refuse, line: Any) -> None:
    _start(policy, refuse, policy.shell_words(str(line)), str(line))
