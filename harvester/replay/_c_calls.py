"""The seal where C code reaches out itself: connections a library makes past Python's socket module.

libpq under psycopg, libcurl, gRPC's C core, libuv under a uvloop loop made directly and ``ctypes``
calling the C library raise no audited event. On Linux, where ``_libc.c`` was built, each loaded
library's imported connections and name lookups (``connect``, ``sendto``, ``sendmsg``, ``sendmmsg``,
``getaddrinfo``, ``gethostbyname``, ``getnameinfo``, ``res_query``...) are pointed at the audit hook's own
checks (``Guard.audit``), once per process; they check nothing while no sealed replay runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ._guard import MAX_RESOLVED, CSocket, resolved

try:  # built where a compiler is (Linux only does anything)
    from . import _libc
except ImportError:  # pragma: no cover - a machine without a C compiler
    _libc = None  # type: ignore[assignment]

__all__ = ["LIBC_ENV", "seal", "sealed", "unchecked_note"]

LIBC_ENV = "HARVESTER_SEAL_LIBC"  # "0": C code's own calls of the C library left unchecked
_sealed: list[bool] = []
_BUILT = _libc is not None and bool(_libc.SUPPORTED)


def seal(audit: Callable[[str, tuple[Any, ...]], None], suites: list[Any]) -> None:
    """Point C code's own calls at ``audit``, which reads the seal in force from ``suites`` and the
    context, unless ``HARVESTER_SEAL_LIBC=0``; called once, by the seal's ``install``."""
    if not _BUILT or os.environ.get(LIBC_ENV, "") == "0":
        return
    _libc.seal(audit, suites, resolved, CSocket, MAX_RESOLVED)
    _sealed.append(True)
    # gRPC's own resolver (c-ares) queries DNS servers from C, past ``getaddrinfo``: the native one is
    # checked and remembers each name (unless the app chose a resolver; gRPC reads it as it is imported)
    os.environ.setdefault("GRPC_DNS_RESOLVER", "native")


def sealed() -> bool:
    """Whether C code's own connections are checked in this process."""
    return bool(_sealed)


def unchecked_note() -> str | None:
    """The note every sealed case carries where ``HARVESTER_SEAL_LIBC=0`` turned the checks off (a
    report that says ``sealed`` must not hide that C code went unchecked); None otherwise."""
    if not _BUILT or os.environ.get(LIBC_ENV, "") != "0":
        return None
    return f"{LIBC_ENV}=0: connections C code made itself (libpq, libcurl, gRPC, ctypes) were not checked"
