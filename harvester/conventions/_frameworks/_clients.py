"""Model SDK clients a raw loop calls (OpenAI, Anthropic): their tracing, turned on as production had it.

An app that calls ``chat.completions.create(tools=...)`` or ``messages.create(tools=...)`` in its own
loop has no framework dispatch to guard (its tools are its own functions: ``@harvester.tool``, and
the seal), but its run is read from spans like any other: the client instrumentor's model-call spans
hold what the model asked for, and promote the app's CHAIN span to the run's root. Production turns
the instrumentor on in its entry point, which a replay does not run; so a replay turns on the one the
recording names (its model calls' instrumentation scopes, ``recorded.instrumentation``), when the
client is in use and nothing traces it already. OpenInference's and OpenLLMetry's instrumentors wrap
the client classes, so chat completions, the Responses API and Anthropic messages, sync and async,
streamed or not, are all traced. Turning a client on in a replay also guards its model calls
(``_client_models``): in a recorded-model replay they are served from the recording; and it marks its
requests to a model API for the seal (``_client_calls``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from ._client_calls import mark
from ._client_models import serve
from ._tracing import instrumented, turn_on

__all__ = ["CLIENTS", "Client", "client_scopes", "untraced"]

Instrumentor = tuple[str, str]  # (module, class): the scope its spans carry starts with the module


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
            undo = turn_on(module, cls, unless=self.instrumentors)
            if undo is not None or self.traced():
                return undo
        return None


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


def client_scopes(scopes: Iterable[str]) -> list[str]:
    """Of a run's model-call instrumentation scopes, those of an SDK client instrumentor a replay can
    turn on: what a case remembers (``recorded.instrumentation``)."""
    return [s for s in scopes if any(client.recorded([s]) for client in CLIENTS)]


def untraced(scopes: Collection[str], loaded: Callable[[Client], bool]) -> list[str]:
    """The recorded instrumentation (``scopes``) of clients in use that nothing traces now: a replay
    reading those clients' model calls sees none of them."""
    out: list[str] = []
    for client in CLIENTS:
        recorded = client.recorded(scopes)
        if recorded and loaded(client) and not client.traced():
            out += [module for module, _ in recorded]
    return out
