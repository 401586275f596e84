"""``parse_target``: which backend a URL names, where it listens, and the project or experiment in its path.

A backend URL names the backend in its scheme (``phoenix://127.0.0.1:6006/default``) because the same
host and port could be any of them, and each speaks its own API. ``+https`` asks for TLS
(``tempo+https://tempo.internal``). The schemes, default ports and which backends have a scope come
from the registry. Credentials never appear here: each backend reads the environment variables its
own clients document, so a token is never on a command line, in shell history or in a file.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from ...errors import InputError
from ._backend import Target
from ._registry import BACKENDS, backend_of, url_forms

__all__ = ["parse_target"]


def parse_target(url: str) -> Target:
    """The ``Target`` a ``--from`` / ``import`` URL names, or ``InputError`` saying which forms exist."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise InputError(f"backend URL {url!r}: {exc}", field="URL") from None
    name, _, transport = parts.scheme.lower().partition("+")
    backend = backend_of(name)
    if backend is None or transport not in ("", "http", "https"):
        example = f"{BACKENDS[0].name}://127.0.0.1:{BACKENDS[0].port}"
        hint = f" (name the backend in the scheme, e.g. {example})" if name in ("http", "https") else ""
        raise InputError(
            f"backend URL {url!r}: unknown backend {parts.scheme!r}{hint}; use one of {url_forms()}", field="URL"
        )
    if parts.username or parts.password:
        raise InputError(
            f"backend URL {url!r}: credentials do not go in the URL (it lands in shell history); "
            "set the backend's environment variables instead (docs/backends/index.md)",
            field="URL",
        )
    if not parts.hostname:
        raise InputError(f"backend URL {url!r}: no host; use {backend.url_form}", field="URL")
    if parts.query or parts.fragment:
        raise InputError(f"backend URL {url!r}: a query or fragment means nothing here", field="URL")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    base = f"{transport or 'http'}://{host}:{port or backend.port}"
    scope = unquote(parts.path.strip("/")) or None
    if scope and backend.scope is None:
        raise InputError(f"backend URL {url!r}: {name} has no projects; use {backend.url_form}", field="URL")
    return Target(name, base, scope)
