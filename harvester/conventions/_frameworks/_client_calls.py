"""Which requests of a model SDK client are the agent's model calls: marked, for the seal.

OpenInference's model spans name the provider, never the URL, so a case recorded through a gateway or
against a local model server holds only the provider's documented host: the recording cannot say where
the agent's model is. Every request the OpenAI and Anthropic clients make passes their base client's
``request`` (the SDK's one door: the stream a helper opens on entering it, a retry too). One to a model
API (chat completions, completions, the Responses API, embeddings, Anthropic messages) runs marked
``seam.model_call`` with the client's endpoint, its ``base_url``'s host and port; where the case's policy
lets the client choose (``Reach.client_endpoints``), the seal lets that request reach that endpoint,
and nothing else. Another request of the client (``client.post`` to another path, an absolute URL) is
not marked, and is put to the seal as the connection to its host it would open (``_reaching``): on a
keep-alive connection a model request pooled, it would send past the seal, as sending raises no
audited event. The mark is in the context, so it follows the request into the tasks and threads its
HTTP client uses, and it closes when the request returns.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import socket
import sys
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ... import seam
from ._patch import guard, subclasses

__all__ = ["DOORS", "MODEL_PATHS", "mark"]

# Per client: the module of its base clients (``SyncAPIClient``, ``AsyncAPIClient``).
DOORS = {"openai": "openai._base_client", "anthropic": "anthropic._base_client"}
# A model API's path, as a request's options give it (relative to ``base_url``).
MODEL_PATHS = ("/chat/completions", "/completions", "/responses", "/embeddings", "/v1/messages", "/v1/complete")
_PORTS = {"https": 443, "http": 80}


def mark(client: str) -> None:
    """Mark ``client``'s model-API requests (once), on its base clients and on any client class that
    defines ``request`` itself (an instrumentor's wrapper on ``OpenAI.request``)."""
    module = DOORS.get(client)
    if module is None:
        return
    for base in ("SyncAPIClient", "AsyncAPIClient"):
        try:
            door = getattr(importlib.import_module(module), base)
        except (ImportError, AttributeError):
            continue
        for owner in subclasses(door):
            raw = owner.__dict__.get("request")
            if raw is not None:
                guard(owner, "request", _marked(inspect.iscoroutinefunction(inspect.unwrap(raw))))


def _marked(asynchronous: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        if asynchronous:

            async def arequest(self: Any, *args: Any, **kwargs: Any) -> Any:
                with _marking(self, args, kwargs):
                    return await original(self, *args, **kwargs)

            return arequest

        def request(self: Any, *args: Any, **kwargs: Any) -> Any:
            with _marking(self, args, kwargs):
                return original(self, *args, **kwargs)

        return request

    return make


def _marking(client: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> contextlib.AbstractContextManager[None]:
    """The request marked a model call at the client's endpoint, when it goes to a model API; any other
    put to the seal first (``_reaching``)."""
    url = getattr(args[1] if len(args) > 1 else kwargs.get("options"), "url", None)
    url = url if isinstance(url, str) else ""
    if _to_a_model(url):
        return seam.model_call(endpoint(client))
    _reaching(client, url)
    return contextlib.nullcontext()


def _to_a_model(url: str) -> bool:
    """``request(cast_to, options, ...)`` posts to a model API: its options' path (without a query, as
    older Anthropic SDKs add ``?beta=true``) is one of ``MODEL_PATHS``."""
    path = url.partition("?")[0]
    return any(path == p or path.startswith(p + "/") for p in MODEL_PATHS)


def _reaching(client: Any, url: str) -> None:
    """Raise the audited event of a connection to the request's host (the client's endpoint, or an
    absolute URL's), on a socket that never connects: a sealed replay refuses it as it would the
    connection itself (``Sealed``), so the request cannot ride a keep-alive connection a model request
    pooled; unsealed, no audit hook decides anything and it passes."""
    where = urlsplit(url) if "://" in url else None
    try:
        host, port = (where.hostname, where.port or _PORTS.get(where.scheme)) if where else _host_port(client)
    except ValueError:  # a port that is no number: the HTTP client refuses the URL itself
        return
    if not host or port is None:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        sys.audit("socket.connect", probe, (host, port))


def endpoint(client: Any) -> str | None:
    """``host:port`` of the client's ``base_url`` (``_host_port``); None when it has none the seal could
    compare."""
    host, port = _host_port(client)
    if not host or port is None:
        return None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _host_port(client: Any) -> tuple[str | None, int | None]:
    """The client's ``base_url`` host, as it is looked up (an international name IDNA-encoded), and the
    port its scheme implies when it names none."""
    url = getattr(client, "base_url", None)
    raw, scheme, port = getattr(url, "raw_host", None), getattr(url, "scheme", None), getattr(url, "port", None)
    host = raw.decode("ascii", "replace") if isinstance(raw, bytes) else None
    return host, port if isinstance(port, int) else _PORTS.get(scheme) if isinstance(scheme, str) else None
