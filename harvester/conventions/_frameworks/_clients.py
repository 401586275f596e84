"""Model SDK clients a raw loop calls (OpenAI, Anthropic): their tracing, turned on as production had it.

An app that calls ``chat.completions.create(tools=...)`` or ``messages.create(tools=...)`` in its own
loop has no framework dispatch to guard (its tools are its own functions: ``@harvester.tool``, and
the seal), but its run is read from spans like any other: the client instrumentor's model-call spans
hold what the model asked for, and promote the app's CHAIN span to the run's root. Production turns
the instrumentor on in its entry point, which a replay does not run; so a replay turns on the one the
recording names (its model calls' instrumentation scopes, ``recorded.instrumentation``), when the
client is in use and nothing traces it already. OpenInference's and OpenLLMetry's instrumentors wrap
the client classes, so chat completions, the Responses API and Anthropic messages, sync and async,
streamed or not, are all traced. OpenTelemetry's own ``opentelemetry-instrumentation-openai-v2``
traces chat completions only, through ``opentelemetry-util-genai``, whose scope
(``opentelemetry.util.genai.handler``) names no client: a run's calls of that scope are the
instrumentor of the provider they name (``client_scopes``). It records content only where the
environment says so (production sets it): a replay of its recording sets it while it runs, as the
replay's spans are read for what the model asked. Turning a client on in a replay also guards its model calls
(``_client_models``): in a recorded-model replay they are served from the recording; and it marks its
requests to a model API for the seal (``_client_calls``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from ._client_calls import mark
from ._client_models import serve
from ._tracing import instrumented, turn_on

__all__ = ["CLIENTS", "Client", "client_scopes", "untraced"]

Instrumentor = tuple[str, str]  # (module, class): the scope its spans carry starts with the module
_GENAI_UTIL = "opentelemetry.util.genai.handler"  # the scope of OpenTelemetry's GenAI instrumentors' spans
_OTEL_OPENAI = "opentelemetry.instrumentation.openai_v2"
# The instrumentor whose ``_GENAI_UTIL`` spans a provider's model calls are, by the provider they name.
_GENAI_UTIL_BY_PROVIDER = {"openai": _OTEL_OPENAI}
# The environment an instrumentor's spans hold content in (it reads it at each call), set while a replay
# of a recording it traced runs, whoever turned it on.
_CONTENT: dict[str, Mapping[str, str]] = {
    _OTEL_OPENAI: {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only",
    }
}


@dataclass(frozen=True)
class Client:
    """One SDK client: the modules whose import means it is in use (``NAME`` and ``ROOTS`` as a framework
    adapter has them, so a session tells it loaded the same way), and the instrumentors that trace it."""

    NAME: str
    ROOTS: tuple[str, ...]
    instrumentors: tuple[Instrumentor, ...]

    def recorded(self, scopes: Iterable[str]) -> list[Instrumentor]:
        """The instrumentors of this client that traced the recording (``scopes``)."""
        return [i for i in self.instrumentors if any(_of(scope, i[0]) for scope in scopes)]

    def traced(self) -> bool:
        """Some instrumentor of this client is on (the app's own, or one a replay turned on)."""
        return any(instrumented(module, cls) for module, cls in self.instrumentors)

    def instrument(self, scopes: Collection[str]) -> Callable[[], None] | None:
        """Guard the client's model calls and mark its requests to a model API (they stay so), and
        turn on the instrumentor the recording used, unless one is on; returns the undo."""
        serve(self.NAME)
        mark(self.NAME)
        for module, cls in self.recorded(scopes):
            restore = _setting(_CONTENT.get(module, {}))
            undo = turn_on(module, cls, unless=self.instrumentors)
            if undo is not None or self.traced():
                return _undoing(undo, restore)
            restore()
        return None


def _setting(environ: Mapping[str, str]) -> Callable[[], None]:
    """Set ``environ`` in the process's environment; returns what puts it back."""
    before = {key: os.environ.get(key) for key in environ}
    os.environ.update(environ)

    def restore() -> None:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    return restore


def _undoing(*undo: Callable[[], None] | None) -> Callable[[], None]:
    def both() -> None:
        for step in undo:
            if step is not None:
                step()

    return both


def _of(scope: str, module: str) -> bool:
    """``scope`` is ``module``'s (OpenLLMetry names its scope after a submodule: ``...openai.v1``)."""
    return scope == module or scope.startswith(module + ".")


CLIENTS: tuple[Client, ...] = (
    Client(
        "openai",
        ("openai",),
        (
            ("openinference.instrumentation.openai", "OpenAIInstrumentor"),
            ("opentelemetry.instrumentation.openai", "OpenAIInstrumentor"),
            (_OTEL_OPENAI, "OpenAIInstrumentor"),
        ),
    ),
    Client(
        "anthropic",
        ("anthropic",),
        (
            ("openinference.instrumentation.anthropic", "AnthropicInstrumentor"),
            ("opentelemetry.instrumentation.anthropic", "AnthropicInstrumentor"),
        ),
    ),
)


def client_scopes(scopes: Iterable[str], providers: Collection[str | None] = ()) -> list[str]:
    """Of a run's model-call instrumentation scopes, those of an SDK client instrumentor a replay can
    turn on: what a case remembers (``recorded.instrumentation``). ``_GENAI_UTIL``'s is OpenTelemetry's
    instrumentor of the client its calls' ``providers`` name."""
    out: list[str] = []
    for scope in scopes:
        if scope == _GENAI_UTIL:
            out += [_GENAI_UTIL_BY_PROVIDER[p] for p in providers if p in _GENAI_UTIL_BY_PROVIDER]
        elif any(client.recorded([scope]) for client in CLIENTS):
            out.append(scope)
    return list(dict.fromkeys(out))


def untraced(scopes: Collection[str], loaded: Callable[[Client], bool]) -> list[str]:
    """The recorded instrumentation (``scopes``) of clients in use that nothing traces now: a replay
    reading those clients' model calls sees none of them."""
    out: list[str] = []
    for client in CLIENTS:
        recorded = client.recorded(scopes)
        if recorded and loaded(client) and not client.traced():
            out += [module for module, _ in recorded]
    return out
