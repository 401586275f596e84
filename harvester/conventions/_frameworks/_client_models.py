"""Serving a raw SDK loop's model calls from the recording, in a recorded-model replay.

An app's own loop calls ``chat.completions.create``, ``responses.create`` or Anthropic's
``messages.create`` / ``messages.stream`` itself: each is guarded once, on the SDK's resource class.
Outside a recorded-model replay (``seam.model_server()`` is None) the guard calls the original as it
was called. Inside one, the live arguments become the ``ModelRequestData`` the server compares with the
recording (``_client_requests``); its answer is then served by the SDK itself: the original method
runs on a copy of the app's client whose HTTP client answers with the recorded answer in the API's
wire format (``_client_answers``), so nothing leaves the process, and the app gets the SDK's own
objects and streams (``stream=True``, the ``.stream()`` helpers, ``with_raw_response``) exactly as a live
call gives them. Serving under the SDK's request machinery, not around it, is what keeps the served
call in the trace: the instrumentors wrap the resource methods (OpenLLMetry, OpenInference's
Anthropic) or the client's ``request`` (OpenInference's OpenAI), so whichever wraps which, the served
call's span is recorded with the served response, and the replayed run reads its model calls.
``ModelInputChanged`` from the server propagates into the app, before any request is made.

Every request a client makes also passes its base client's ``request`` (the SDK's one door: a model
call, the stream a helper opens on entering it, a retry), which marks it ``seam.model_call`` with the
client's endpoint (its ``base_url``'s host and port): in a replay on the live model of a case whose
recording named only providers (OpenInference names no URL), the seal lets the request reach that
endpoint (a gateway, a local server), and nothing else. The mark is in the context, so it follows the
request into the tasks and threads its HTTP client uses.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import json
import sys
from collections.abc import Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

from ... import seam
from ._client_answers import BODIES, sse
from ._client_requests import REQUESTS
from ._patch import guard, subclasses

if TYPE_CHECKING:
    from ...model import ModelAnswerData

__all__ = ["METHODS", "serve"]

_MESSAGES = "anthropic.resources.messages.messages"
_CHAT = "openai.resources.chat.completions.completions"
_RESPONSES = "openai.resources.responses.responses"
# Per client: (module, class, method, API) of each method an app's model call enters the SDK by.
# (OpenAI's ``responses.stream`` and ``chat.completions.stream`` call ``create``; Anthropic's
# ``messages.stream`` posts by itself.)
METHODS: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    "openai": (
        (_CHAT, "Completions", "create", "chat"),
        (_CHAT, "AsyncCompletions", "create", "chat"),
        (_CHAT, "Completions", "parse", "chat"),  # structured output: it posts by itself
        (_CHAT, "AsyncCompletions", "parse", "chat"),
        (_RESPONSES, "Responses", "create", "responses"),
        (_RESPONSES, "AsyncResponses", "create", "responses"),
        (_RESPONSES, "Responses", "parse", "responses"),
        (_RESPONSES, "AsyncResponses", "parse", "responses"),
    ),
    "anthropic": (
        (_MESSAGES, "Messages", "create", "anthropic"),
        (_MESSAGES, "AsyncMessages", "create", "anthropic"),
        (_MESSAGES, "Messages", "parse", "anthropic"),
        (_MESSAGES, "AsyncMessages", "parse", "anthropic"),
        (_MESSAGES, "Messages", "stream", "anthropic"),
        (_MESSAGES, "AsyncMessages", "stream", "anthropic"),
    ),
}
# Per client: the module of its base clients, whose ``request`` every HTTP request of the SDK passes.
DOORS = {"openai": "openai._base_client", "anthropic": "anthropic._base_client"}
_SERVED = itertools.count(1)  # served responses' ids: unique in the process (OpenLLMetry keys responses by id)


def serve(client: str) -> None:
    """Guard ``client``'s model-call methods and mark its requests (once; what an SDK version lacks is
    left alone)."""
    for module, cls, method, api in METHODS.get(client, ()):
        owner = _class(module, cls)
        raw = owner.__dict__.get(method) if owner is not None else None
        if owner is not None and raw is not None:
            guard(owner, method, _guarded(api, inspect.iscoroutinefunction(inspect.unwrap(raw))))
    for base in ("SyncAPIClient", "AsyncAPIClient"):
        door = _class(DOORS.get(client, ""), base)
        for owner in subclasses(door) if door is not None else ():
            raw = owner.__dict__.get("request")  # the base's, or an instrumentor's wrapper on a client class
            if raw is not None:
                guard(owner, "request", _marked(inspect.iscoroutinefunction(inspect.unwrap(raw))))


def _class(module: str, name: str) -> type | None:
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None
    return found if isinstance(found, type) else None


def _marked(asynchronous: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The SDK's ``request``, run as a model call (``seam.model_call``)."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        if asynchronous:

            async def arequest(self: Any, *args: Any, **kwargs: Any) -> Any:
                with seam.model_call(_endpoint(self)):
                    return await original(self, *args, **kwargs)

            return arequest

        def request(self: Any, *args: Any, **kwargs: Any) -> Any:
            with seam.model_call(_endpoint(self)):
                return original(self, *args, **kwargs)

        return request

    return make


def _endpoint(client: Any) -> str | None:
    """``host:port`` of the client's ``base_url`` (its scheme's port when it names none), None when it
    has none the seal could compare."""
    url = getattr(client, "base_url", None)
    raw, scheme = getattr(url, "raw_host", None), getattr(url, "scheme", None)
    # the name as it is looked up (an international name IDNA-encoded), as the seal sees it
    host = raw.decode("ascii", "replace") if isinstance(raw, bytes) else getattr(url, "host", None)
    if not isinstance(host, str) or not host:
        return None
    port = getattr(url, "port", None)
    port = port if isinstance(port, int) else {"https": 443, "http": 80}.get(scheme if isinstance(scheme, str) else "")
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port is not None else shown


def _guarded(api: str, asynchronous: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        if asynchronous:

            async def aguarded(self: Any, *args: Any, **kwargs: Any) -> Any:
                return await original(_resource(self, api, kwargs), *args, **kwargs)

            return aguarded

        def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
            return original(_resource(self, api, kwargs), *args, **kwargs)

        return guarded

    return make


def _resource(resource: Any, api: str, kwargs: MutableMapping[str, Any]) -> Any:
    """The resource to call: ``resource`` itself, or in a recorded-model replay that has the answer,
    one like it on a client that answers with it."""
    server = seam.model_server()
    if server is None:
        return resource
    for key in ("messages", "input", "tools", "system"):
        if isinstance(kwargs.get(key), Iterator):  # a generator read once here is listed for the SDK too
            kwargs[key] = list(kwargs[key])
    answer = server.answer(REQUESTS[api](kwargs))
    if answer is None:
        return resource
    model = answer["model"] or (kwargs["model"] if isinstance(kwargs.get("model"), str) else "")
    http = _http(type(resource), answer, api, model)
    return type(resource)(resource._client.with_options(http_client=http, max_retries=0))


def _http(resource: type, answer: ModelAnswerData, api: str, model: str) -> Any:
    """An HTTP client of the kind the SDK of ``resource`` takes (``httpx2``, or ``httpx`` in older
    SDKs), async for an async resource, whose every response is ``answer``: whole, or as events when
    the request asks to stream."""
    base = sys.modules[f"{resource.__module__.partition('.')[0]}._base_client"]
    httpx = getattr(base, "httpx2", None) or base.httpx
    whole, events = BODIES[api]
    n = next(_SERVED)

    def respond(request: Any) -> Any:
        body = json.loads(request.content or b"{}")
        if body.get("stream"):
            sent = sse(events(answer, model, n, body))
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sent)
        return httpx.Response(200, json=whole(answer, model, n, body))

    transport = httpx.MockTransport(respond)
    asynchronous = resource.__name__.startswith("Async")
    return httpx.AsyncClient(transport=transport) if asynchronous else httpx.Client(transport=transport)
