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
from ._patch import guard

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
_SERVED = itertools.count(1)  # served responses' ids: unique in the process (OpenLLMetry keys responses by id)


def serve(client: str) -> None:
    """Guard ``client``'s model-call methods (once; a method an SDK version lacks is left alone)."""
    for module, cls, method, api in METHODS.get(client, ()):
        try:
            owner = getattr(importlib.import_module(module), cls)
        except (ImportError, AttributeError):
            continue
        raw = owner.__dict__.get(method)
        if raw is not None:
            guard(owner, method, _guarded(api, inspect.iscoroutinefunction(inspect.unwrap(raw))))


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
