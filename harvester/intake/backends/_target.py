"""``Target``: which backend a URL names, where it listens, and the project or experiment in its path.

A backend URL names the backend in its scheme (``phoenix://127.0.0.1:6006/default``) because the same
host and port could be any of them, and each speaks its own API. ``+https`` asks for TLS
(``tempo+https://tempo.internal``). Credentials never appear here: each backend reads the environment
variables its own clients document, so a token is never on a command line, in shell history or in a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ...errors import InputError

__all__ = ["DEFAULT_PORTS", "Target", "parse_target"]

DEFAULT_PORTS = {"phoenix": 6006, "mlflow": 5000, "jaeger": 16686, "tempo": 3200}


@dataclass(frozen=True, slots=True)
class Target:
    backend: str  # phoenix | mlflow | jaeger | tempo
    base_url: str  # http(s)://host:port, no trailing slash
    scope: str | None = None  # Phoenix project, MLflow experiment (id or name); None: the backend's default

    def __str__(self) -> str:
        return f"{self.backend} at {self.base_url}" + (f" ({self.scope})" if self.scope else "")


def parse_target(url: str) -> Target:
    """The ``Target`` a ``--from`` / ``import`` URL names, or ``InputError`` saying which forms exist."""
    forms = ", ".join(f"{b}://host:port" for b in DEFAULT_PORTS)
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise InputError(f"backend URL {url!r}: {exc}", field="URL") from None
    backend, _, transport = parts.scheme.lower().partition("+")
    if backend not in DEFAULT_PORTS or transport not in ("", "http", "https"):
        hint = (
            " (name the backend in the scheme, e.g. phoenix://127.0.0.1:6006)" if backend in ("http", "https") else ""
        )
        raise InputError(
            f"backend URL {url!r}: unknown backend {parts.scheme!r}{hint}; use one of {forms}", field="URL"
        )
    if parts.username or parts.password:
        raise InputError(
            f"backend URL {url!r}: credentials do not go in the URL (it lands in shell history); "
            "set the backend's environment variables instead (docs/backends.md)",
            field="URL",
        )
    if not parts.hostname:
        raise InputError(f"backend URL {url!r}: no host; use {backend}://host:port", field="URL")
    if parts.query or parts.fragment:
        raise InputError(f"backend URL {url!r}: a query or fragment means nothing here", field="URL")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    base = f"{transport or 'http'}://{host}:{port or DEFAULT_PORTS[backend]}"
    scope = unquote(parts.path.strip("/")) or None
    if scope and backend in ("jaeger", "tempo"):
        raise InputError(f"backend URL {url!r}: {backend} has no projects; use {backend}://host:port", field="URL")
    return Target(backend, base, scope)
