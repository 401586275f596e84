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
HTTP client uses, and it closes when the request returns. The same holds for every request sent through
``httpx`` (and ``httpx2``, the transport of newer SDKs) outside a model call (``_check_sends``): an
``httpx.Client`` the app shares as the SDK's ``http_client=`` holds the connection its model request
pooled, and the app's own request to that endpoint would otherwise ride it.
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

from opentelemetry import context as otel_context

from ... import seam
from ._patch import guard, subclasses

__all__ = ["DOORS", "MODEL_PATHS", "mark"]

# Per client: the module of its base clients (``SyncAPIClient``, ``AsyncAPIClient``).
DOORS = {"openai": "openai._base_client", "anthropic": "anthropic._base_client"}
# A model API's path, as a request's options give it (relative to ``base_url``).
MODEL_PATHS = ("/chat/completions", "/completions", "/responses", "/embeddings", "/v1/messages", "/v1/complete")
_PORTS = {"https": 443, "http": 80}
_TRANSPORTS = ("httpx", "httpx2")  # the SDKs' HTTP clients: httpx, and httpx2 in openai 3 and anthropic 2
# A socket per family that never connects: what a request's audited connection names (made once).
_PROBES: dict[int, socket.socket] = {}


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
    _check_sends()


def _check_sends() -> None:
    """``Client.send`` and ``AsyncClient.send`` of the SDKs' HTTP clients that put each request made
    outside a model call to the seal as the connection to its host it would open (once): sending on a
    pooled connection raises no audited event."""
    for name in _TRANSPORTS:
        module = sys.modules.get(name)
        for owner in (getattr(module, "Client", None), getattr(module, "AsyncClient", None)):
            if isinstance(owner, type):
                guard(owner, "send", _checked(owner.__name__ == "AsyncClient"))


def _checked(asynchronous: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        if asynchronous:

            async def asend(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
                _sending(request)
                return await original(self, request, *args, **kwargs)

            return asend

        def send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            _sending(request)
            return original(self, request, *args, **kwargs)

        return send

    return make


def _sending(request: Any) -> None:
    """A request about to be sent, outside a model call (the SDK's model request was let through at its
    door): put to the seal as its connection."""
    if seam.model_endpoint(otel_context.get_current()) is not None:
        return
    url = getattr(request, "url", None)
    raw, scheme, port = getattr(url, "raw_host", None), getattr(url, "scheme", None), getattr(url, "port", None)
    if isinstance(raw, bytes) and raw:
        _connecting(raw.decode("ascii", "replace"), port if isinstance(port, int) else _PORTS.get(str(scheme)))


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
    _connecting(host, port)


def _connecting(host: str | None, port: int | None) -> None:
    """Raise the audited event of a connection to ``host:port`` on a socket that never connects."""
    if not host or port is None:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    probe = _PROBES.get(family)
    if probe is None:
        probe = _PROBES.setdefault(family, socket.socket(family))
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
