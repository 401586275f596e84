"""What a sealed replay may reach: hosts (with their ports) and commands, matched the way users write them.

A host entry is ``host``, ``host:port``, ``*.domain`` (any subdomain), an IP address (IPv6 in brackets
with a port), or ``unix:/path`` for a local socket; a host is compared without case and an international
name in its IDNA (punycode) form, as clients look it up, an address by
value (``::1`` and ``0:0::1`` are one). A command entry is words that must begin the command line; a
first word without ``/`` matches the program's base name (``npx`` matches ``/usr/bin/npx``; ``python``
any ``python3.X``), one with ``/`` the path itself. A shell line (``sh -c``, ``os.system``) matches only
when it is a plain command: one holding ``;``, ``|``, ``&``, ``$``, backquotes or redirections could run
anything after it.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

__all__ = ["SHELLS", "Host", "Policy", "command_line", "parse_host", "words"]

_MAX_REMEMBERED = 4096
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
_SHELL_META = frozenset(";|&$`<>(){}\n*?")
_PYTHON = re.compile(r"python(3(\.\d+)?)?")


class Host(NamedTuple):
    """One allowed host: a name (lower case, maybe a pattern), a normalized address, or a unix path."""

    name: str
    port: int | None


@functools.lru_cache(maxsize=4096)
def _address(host: str) -> str | None:
    """The canonical text of an IP address, or None for a name (cached: a connection asks per host)."""
    try:
        return str(ipaddress.ip_address(host.strip("[]").split("%", 1)[0]))
    except ValueError:
        return None


def parse_host(entry: str) -> Host:
    """``host``/``host:port``/``[v6]:port``/``unix:/path`` -> ``Host`` (the config has checked the form)."""
    if entry.startswith("unix:"):
        return Host(entry, None)
    port: int | None = None
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = int(rest[1:]) if rest.startswith(":") else None
    elif entry.count(":") == 1:
        host, _, text = entry.partition(":")
        port = int(text)
    else:
        host = entry  # a name, or a bare IPv6 address
    return Host(_canonical(host), port)


def _pattern(name: str) -> str:
    """A host pattern as a regex: a leading ``*.`` is any subdomain, however deep; any other ``*`` is
    within one label (``bedrock-runtime.*.amazonaws.com`` is a region, not ``bedrock-runtime.<any
    bucket>.s3.amazonaws.com``)."""
    deep = name.startswith("*.")
    label = "[^.]*".join(re.escape(part) for part in (name[2:] if deep else name).split("*"))
    return f"(?:(?:[^.]+\\.)+{label})\\Z" if deep else f"(?:{label})\\Z"


def _canonical(host: str) -> str:
    """A host as the policy compares it: an address's canonical text, or a ``_name``."""
    return _address(host) or _name(host)


def _name(host: str) -> str:
    """A name as the policy compares it: lower case, no trailing dot, an international name in its IDNA
    form, which is what clients look up (``config.host_entry`` keeps the config's entries so; this
    module stays standard library only: a sealed child loads it by its path)."""
    name = host.lower().rstrip(".")
    if not name.isascii():
        with contextlib.suppress(UnicodeError):
            name = name.encode("idna").decode("ascii")
    return name


def words(argv: Any) -> list[str]:
    """An audited start's argv (a path, or a list of str, bytes or paths) as text words."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        return [os.fsdecode(argv)]
    return [os.fsdecode(w) if isinstance(w, (str, bytes, os.PathLike)) else str(w) for w in argv or ()]


def command_line(program: Any, argv: Any) -> list[str] | None:
    """The words of a command as it will run (``program`` overrides ``argv[0]``); a shell's ``-c`` line
    split into words, or None when that line is more than one plain command."""
    line = words(argv)
    if program is not None:
        line = [os.fsdecode(program), *line[1:]] if line else [os.fsdecode(program)]
    if len(line) >= 3 and os.path.basename(line[0]) in SHELLS and line[1] == "-c":
        return shell_words(line[2])
    return line


def shell_words(line: str) -> list[str] | None:
    """A shell command line as words, or None when it holds anything but one plain command."""
    if any(ch in _SHELL_META for ch in line):
        return None
    try:
        return shlex.split(line)
    except ValueError:
        return None


class Policy:
    """Hosts and commands a replay may reach; immutable, so a case's is the suite's plus its model hosts."""

    __slots__ = (
        "_addresses",
        "_commands",
        "_names",
        "_patterns",
        "_unix",
        "allowed",
        "commands",
        "fast",
        "hosts",
        "model_endpoint",
    )

    def __init__(
        self,
        hosts: Iterable[str] = (),
        commands: Iterable[str] = (),
        model_endpoint: Callable[[], str | None] | None = None,
    ) -> None:
        self.hosts = tuple(dict.fromkeys(hosts))
        self.commands = tuple(dict.fromkeys(commands))
        # The endpoint of the model SDK client's request the calling code is inside (``seam.model_call``),
        # which it may reach whatever it is; None: no such request passes (``Reach.client_endpoints``).
        self.model_endpoint = model_endpoint
        parsed = [parse_host(h) for h in self.hosts]
        self._unix = frozenset(h.name[5:] for h in parsed if h.name.startswith("unix:"))
        self._names: dict[str, set[int | None]] = {}
        patterns: dict[int | None, list[str]] = {}
        self._addresses: dict[str, set[int | None]] = {}
        for h in parsed:
            if h.name.startswith("unix:"):
                continue
            if "*" in h.name:
                patterns.setdefault(h.port, []).append(_pattern(h.name))
            else:
                table = self._addresses if _address(h.name) is not None else self._names
                table.setdefault(h.name, set()).add(h.port)
        # One regex per port (None: any port) for every pattern: a name is matched once, not per pattern.
        self._patterns = {port: re.compile("|".join(found)) for port, found in patterns.items()}
        self._commands = [w for w in (shlex.split(c) for c in self.commands) if w]
        # What the audit checks found allowed, by the event's own arguments: a connection the case may
        # make is then one dict lookup (the policy never changes; cleared when full, like a cache).
        self.allowed: dict[Any, bool] = {}
        # What the C hook (``_hook.c``) decides without Python: an exact name or address text -> the
        # ports it may be reached at (None: any); a name a pattern allowed joins it when first allowed.
        self.fast: dict[str, int | frozenset[int] | None] = {
            host: _ports(ports) for table in (self._names, self._addresses) for host, ports in table.items()
        }

    command_line = staticmethod(command_line)
    shell_words = staticmethod(shell_words)

    def with_hosts(self, hosts: Iterable[str], *, model_endpoint: Callable[[], str | None] | None = None) -> Policy:
        return Policy((*self.hosts, *hosts), self.commands, model_endpoint)

    def allows_model_call(self, host: str, port: int | None) -> bool:
        """``host`` at ``port`` (None: a lookup naming none) is the endpoint of the model SDK client's
        request the calling code is inside, where this policy lets such a request through."""
        endpoint = self.model_endpoint() if self.model_endpoint is not None else None
        if endpoint is None:
            return False
        allowed = parse_host(endpoint)
        return allowed.name == _canonical(host) and port in (None, allowed.port)

    def allows_host(self, host: str, port: int | None) -> bool:
        """A name or an address, at ``port`` (None: a lookup that names no port, allowed at any)."""
        found = self.allowed.get((host, port))
        if found is None:
            found = self._allows_host(host, port)
            self.remember((host, port), found)
            if found and type(host) is str and type(port) is int:  # exact types: what the C hook looks up
                self._learn(host, port)
        return found

    def _learn(self, host: str, port: int) -> None:
        """``host`` (as the code wrote it) is allowed at ``port``: the C hook decides it from now on."""
        if host not in self.fast and len(self.fast) >= _MAX_REMEMBERED:
            return
        known = self.fast.get(host, frozenset())
        if known is not None:
            self.fast[host] = _ports({known, port} if isinstance(known, int) else {*known, port})

    def remember(self, key: Any, allowed: bool) -> None:
        if len(self.allowed) >= _MAX_REMEMBERED:
            self.allowed.clear()
        self.allowed[key] = allowed

    def _allows_host(self, host: str, port: int | None) -> bool:
        address = _address(host)
        if address is not None:
            return _port_ok(self._addresses.get(address), port)
        name = _name(host)
        if _port_ok(self._names.get(name), port):
            return True
        return any(
            (at is None or port in (None, at)) and pattern.match(name) is not None
            for at, pattern in self._patterns.items()
        )

    def allows_unix(self, path: str) -> bool:
        return path in self._unix

    def allows_command(self, words: Sequence[str] | None) -> bool:
        if not words:
            return False
        return any(_begins(entry, words) for entry in self._commands)


def _ports(ports: set[int | None]) -> int | frozenset[int] | None:
    """The ports a host may be reached at, as the C hook reads them: None any, an int the one port."""
    if None in ports:
        return None
    return next(iter(ports)) if len(ports) == 1 else frozenset(p for p in ports if p is not None)


def _port_ok(ports: set[int | None] | None, port: int | None) -> bool:
    return ports is not None and (None in ports or port is None or port in ports)


def _begins(entry: list[str], words: Sequence[str]) -> bool:
    if len(words) < len(entry):
        return False
    program = entry[0]
    first = os.path.normpath(words[0]) if "/" in program else os.path.basename(words[0])
    if first != (os.path.normpath(program) if "/" in program else program) and not _same_python(program, first):
        return False
    return list(words[1 : len(entry)]) == entry[1:]


def _same_python(program: str, name: str) -> bool:
    """``python`` names any CPython (``python3``, ``python3.12``: what ``sys.executable`` is called), and
    ``python3`` any Python 3."""
    return program in ("python", "python3") and _PYTHON.fullmatch(name) is not None and name.startswith(program)
