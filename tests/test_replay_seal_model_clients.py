"""The agent's own model, where the recording cannot say where it is: OpenInference's model spans name
the provider, never the URL, so a case recorded through a gateway or against a local server names only
the provider's documented host. A replay on the live model then lets the agent's model SDK client reach
the endpoint it is set to; the same host reached any other way is refused, and a replay answered from
the recording reaches no model at all. (A recording that named its endpoint is held to it:
``test_replay_seal``.) Real OpenAI and Anthropic SDKs, sync and async, streaming too, against a real
loopback model server."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import httpx2
import pytest
from anthropic import Anthropic, AsyncAnthropic
from openai import AsyncOpenAI, OpenAI
from opentelemetry import context as otel_context

from harvester import seam
from harvester.case import AgentCase
from harvester.errors import Sealed
from harvester.replay import replay
from harvester.replay._policy import Policy
from harvester.report import Report
from tests.builders.backends import Loopback, loopback, routes
from tests.builders.sdk_http import MODEL, model_server

ANSWER = "Refund A1001 issued."


def _openai(url: str) -> str:
    return _answer(OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0))


def _answer(client: OpenAI) -> str:
    reply = client.chat.completions.create(model=MODEL["chat"], messages=[{"role": "user", "content": "Refund A1001"}])
    return reply.choices[0].message.content or ""


async def _async_openai_stream(url: str) -> str:
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
    chunks = await client.chat.completions.create(
        model=MODEL["chat"], messages=[{"role": "user", "content": "Refund A1001"}], stream=True
    )
    return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])


def _anthropic_stream(url: str) -> str:
    client = Anthropic(base_url=url, api_key="sk-test", max_retries=0)
    with client.messages.stream(
        model=MODEL["anthropic"], max_tokens=64, messages=[{"role": "user", "content": "Refund A1001"}]
    ) as events:
        return events.get_final_text()


async def _async_anthropic(url: str) -> str:
    client = AsyncAnthropic(base_url=url, api_key="sk-test", max_retries=0)
    reply = await client.messages.create(
        model=MODEL["anthropic"], max_tokens=64, messages=[{"role": "user", "content": "Refund A1001"}]
    )
    return reply.content[0].text  # type: ignore[union-attr]


# client -> (the API its server speaks, the model call, the path it posts to)
CLIENTS: dict[str, tuple[str, Callable[[str], Any], str]] = {
    "openai": ("chat", _openai, "/v1/chat/completions"),
    "async-openai-stream": ("chat", _async_openai_stream, "/v1/chat/completions"),
    "anthropic-stream": ("anthropic", _anthropic_stream, "/v1/messages"),
    "async-anthropic": ("anthropic", _async_anthropic, "/v1/messages"),
}


def serving(api: str) -> AbstractContextManager[Loopback]:
    return model_server(api, [ANSWER])


def case(*hosts: str) -> AgentCase:
    """A case whose recording named ``hosts``, with its one model call's answer (for ``--model recorded``)."""
    recorded = {"trajectory": [], "stop": "answered", "model_hosts": list(hosts)}
    doc = {"id": "refund", "status": "accepted", "prompt": "Refund A1001", "recorded": recorded}
    return AgentCase.model_validate({**doc, "model_fixtures": [{"answer": {"text": ANSWER}}]})


def sealed(report: Report) -> list[str]:
    return [c.detail for r in report.results for c in r.checks if c.name == "sealed" and c.passed is False]


def _outside(url: str) -> str:
    """The model server's host reached outside the SDK client: the seal's to refuse."""
    try:
        urllib.request.urlopen(f"{url}/outside", timeout=5).read()
    except urllib.error.URLError as exc:  # urllib's wrapping of the refusal
        return "refused" if isinstance(exc.reason, Sealed) else repr(exc)
    return "reached"


def build_for(client: str, url: str, said: list[str]) -> Callable[[], Callable[[str], Any]]:
    """The agent answers with its model's answer, then reaches the model's host itself; ``said`` gets
    what each did."""
    _, call, _ = CLIENTS[client]

    def build() -> Callable[[str], Any]:
        if client.startswith("async"):

            async def agent(prompt: str) -> str:
                said.extend([await call(url), _outside(url)])
                return said[0]

            return agent

        def sync_agent(prompt: str) -> str:
            said.extend([call(url), _outside(url)])
            return said[0]

        return sync_agent

    return build


@pytest.mark.parametrize("client", list(CLIENTS))
def test_the_agents_model_client_reaches_its_own_endpoint_and_nothing_else_does(client):
    api, _, path = CLIENTS[client]
    said: list[str] = []
    with serving(api) as model:
        report = replay([case("api.openai.com")], build_for(client, model.origin, said), timeout=30)
    assert said == [ANSWER, "refused"]
    assert [s.path for s in model.seen] == [path]
    (detail,) = sealed(report)
    assert f"connect to 127.0.0.1:{model.port}: not a model host" in detail


def _root(exc: BaseException) -> str:
    """The refusal under the SDK's ``APIConnectionError`` (and httpx's under it), or the error itself."""
    while not isinstance(exc, Sealed) and (exc.__cause__ or exc.__context__) is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return type(exc).__name__


def test_a_replay_answered_from_the_recording_lets_no_model_request_out():
    """``--model recorded`` runs offline: a model request the recording does not answer (here an
    embedding, which no model fixture serves) is refused, not sent; on the live model it is sent."""
    said: list[str] = []

    def build() -> Callable[[str], Any]:
        def agent(prompt: str) -> str:
            client = OpenAI(base_url=f"{model.origin}/v1", api_key="sk-test", max_retries=0)
            try:  # (the chat server's answer is no embedding: what matters is whether it was asked)
                client.embeddings.create(model="text-embedding-3-small", input=prompt)
            except Exception as exc:
                said.append(_root(exc))
            return said[-1] if said else ""

        return agent

    with serving("chat") as model:
        recorded = replay([case("api.openai.com")], build, timeout=30, model="recorded")
        assert model.seen == [] and said == ["Sealed"]
        assert f"connect to 127.0.0.1:{model.port}" in sealed(recorded)[0]
        live = replay([case("api.openai.com")], build, timeout=30)
    assert [s.path for s in model.seen] == ["/v1/embeddings"] and sealed(live) == [] and "Sealed" not in said[1:]


def test_a_request_of_the_client_to_no_model_api_is_refused():
    """The client's other requests are not model calls: ``client.post`` to another path of its endpoint
    (or to an absolute URL), from a client pointed at a service that is no model."""
    said: list[str] = []
    with serving("chat") as payments:

        def build() -> Callable[[str], Any]:
            def agent(prompt: str) -> str:
                client = OpenAI(base_url=payments.origin, api_key="sk-test", max_retries=0)
                for path in ("/refunds", f"{payments.origin}/v1/chat/completions"):
                    try:
                        client.post(path, cast_to=object, body={"order_id": "A1001"})
                        said.append("sent")
                    except Exception as exc:
                        said.append(_root(exc))
                return ", ".join(said)

            return agent

        report = replay([case("api.openai.com")], build, timeout=30)
    assert said == ["Sealed", "Sealed"] and payments.seen == [] and len(sealed(report)) == 1


def test_a_request_of_the_client_on_a_connection_its_model_call_kept_is_refused():
    """The client's pool keeps the model request's connection (HTTP/1.1): sending raises no audited event,
    so its next request, to another path, would leave on it unchecked; it is put to the seal as the
    connection it would open, and refused."""
    said: list[str] = []
    with model_server("chat", [ANSWER], keep_alive=True) as gateway:

        def build() -> Callable[[str], Any]:
            def agent(prompt: str) -> str:
                client = OpenAI(base_url=f"{gateway.origin}/v1", api_key="sk-test", max_retries=0)
                said.append(_answer(client))
                try:
                    client.post("/audit", cast_to=object, body={"answer": said[0]})
                    said.append("sent")
                except Exception as exc:
                    said.append(_root(exc))
                return said[0]

            return agent

        report = replay([case("api.openai.com")], build, timeout=30)
    assert said == [ANSWER, "Sealed"] and [s.path for s in gateway.seen] == ["/v1/chat/completions"]
    assert len(sealed(report)) == 1


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_request_of_an_http_client_shared_with_the_model_client_is_refused(asynchronous):
    """An ``http_client=`` the app shares with its model client holds the connection the model request
    pooled: the app's own request on it, to that same endpoint, is put to the seal and refused."""
    import asyncio

    said: list[str] = []
    with model_server("chat", [ANSWER], keep_alive=True) as gateway:

        async def agent_async() -> str:
            async with httpx2.AsyncClient() as shared:
                client = AsyncOpenAI(base_url=f"{gateway.origin}/v1", api_key="sk-test", http_client=shared)
                reply = await client.chat.completions.create(
                    model=MODEL["chat"], messages=[{"role": "user", "content": "Refund A1001"}]
                )
                said.append(reply.choices[0].message.content or "")
                try:
                    await shared.post(f"{gateway.origin}/refunds", json={"order_id": "A1001"})
                    said.append("sent")
                except Exception as exc:
                    said.append(_root(exc))
            return said[0]

        def agent_sync() -> str:
            with httpx2.Client() as shared:
                client = OpenAI(base_url=f"{gateway.origin}/v1", api_key="sk-test", http_client=shared)
                said.append(_answer(client))
                try:
                    shared.post(f"{gateway.origin}/refunds", json={"order_id": "A1001"})
                    said.append("sent")
                except Exception as exc:
                    said.append(_root(exc))
            return said[0]

        def build() -> Callable[[str], Any]:
            return (lambda prompt: asyncio.run(agent_async())) if asynchronous else (lambda prompt: agent_sync())

        report = replay([case("api.openai.com")], build, timeout=30)
    assert said == [ANSWER, "Sealed"] and [s.path for s in gateway.seen] == ["/v1/chat/completions"]
    assert len(sealed(report)) == 1


def test_a_model_path_with_a_query_is_a_model_request():
    """Older Anthropic SDKs post their beta messages to ``/v1/messages?beta=true`` (pydantic-ai's and
    LangChain's Anthropic models with betas)."""
    said: list[str] = []
    with serving("anthropic") as model:

        def build() -> Callable[[str], Any]:
            def agent(prompt: str) -> str:
                client = Anthropic(base_url=model.origin, api_key="sk-test", max_retries=0)
                body = {
                    "model": MODEL["anthropic"],
                    "max_tokens": 64,
                    "messages": [{"role": "user", "content": prompt}],
                }
                reply = client.post("/v1/messages?beta=true", cast_to=object, body=body)
                said.append(str(reply["content"][0]["text"]))  # type: ignore[index]
                return said[-1]

            return agent

        report = replay([case("api.anthropic.com")], build, timeout=30)
    assert said == [ANSWER] and sealed(report) == [] and [s.path for s in model.seen] == ["/v1/messages?beta=true"]


def test_the_policy_lets_the_marked_endpoint_through_only_while_the_request_runs():
    """The rule itself, as a lookup meets it too (a gateway's name, looked up in the executor thread
    asyncio uses, which the context follows)."""
    from harvester.replay._seal import model_endpoint

    choosing, held = Policy(model_endpoint=model_endpoint), Policy()
    assert not choosing.allows_model_call("gateway.internal", 8080)
    with seam.model_call("gateway.internal:8080"):
        assert choosing.allows_model_call("Gateway.Internal.", 8080)
        assert choosing.allows_model_call("gateway.internal", None)  # a lookup naming no port
        assert not held.allows_model_call("gateway.internal", 8080)
        for host, port in (("gateway.internal", 9090), ("hooks.slack.com", 443), ("10.0.0.5", 8080)):
            assert not choosing.allows_model_call(host, port)  # another port, or another host (a proxy)
        ctx = otel_context.get_current()
    assert seam.model_endpoint(ctx) is None  # a thread the request left behind holds no mark
    with seam.model_call("[::1]:8000"):
        assert choosing.allows_model_call("0:0::1", 8000)
    with seam.model_call(None):  # a client with no endpoint the seal can read
        assert not choosing.allows_model_call("gateway.internal", 8080)


def test_a_process_forked_inside_the_request_holds_no_mark():
    """Its copy of the mark would never close: the child finds it closed at once."""
    import os

    reader, writer = os.pipe()
    with seam.model_call("gateway.internal:8080"):
        pid = os.fork()
        if pid == 0:  # the child
            os.write(writer, b"open" if seam.model_endpoint(otel_context.get_current()) else b"closed")
            os._exit(0)
        os.waitpid(pid, 0)
        assert seam.model_endpoint(otel_context.get_current()) == "gateway.internal:8080"
    assert os.read(reader, 16) == b"closed"


def test_a_request_hook_of_the_client_reaches_no_other_host():
    """Code that runs inside the client's request (an ``httpx`` event hook posting to a webhook) is not
    the model: only the client's own endpoint passes."""
    said: list[str] = []
    with serving("chat") as model, loopback(routes({})) as webhook:

        def hook(request: Any) -> None:
            said.append(_outside(webhook.origin))

        def build() -> Callable[[str], Any]:
            def agent(prompt: str) -> str:
                http = httpx2.Client(event_hooks={"request": [hook]})
                client = OpenAI(base_url=f"{model.origin}/v1", api_key="sk-test", max_retries=0, http_client=http)
                reply = client.chat.completions.create(
                    model=MODEL["chat"], messages=[{"role": "user", "content": prompt}]
                )
                said.append(reply.choices[0].message.content or "")
                return said[-1]

            return agent

        report = replay([case("api.openai.com")], build, timeout=30)
    assert said == ["refused", ANSWER] and webhook.seen == [] and len(model.seen) == 1
    (detail,) = sealed(report)
    assert f"connect to 127.0.0.1:{webhook.port}" in detail


@pytest.mark.parametrize("client", ["openai", "async-openai-stream"])
def test_a_client_an_instrumentor_wrapped_first_is_marked_too(client):
    """OpenInference wraps ``OpenAI.request`` itself, before the replay when the app instruments at
    import: that wrapper is where every request starts, so it is marked too."""
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    said: list[str] = []
    try:
        with serving("chat") as model:
            report = replay([case("api.openai.com")], build_for(client, model.origin, said), timeout=30)
    finally:
        instrumentor.uninstrument()
    assert said == [ANSWER, "refused"] and [s.path for s in model.seen] == ["/v1/chat/completions"]
    assert len(sealed(report)) == 1
    # its wrapper still sees its client: the model call is traced, as the replayed run is read from it
    spans = [s for s in exporter.get_finished_spans() if (s.attributes or {}).get("openinference.span.kind") == "LLM"]
    assert [(s.attributes or {}).get("llm.model_name") for s in spans] == [MODEL["chat"]]


def test_only_a_recording_that_names_no_endpoint_of_its_own_lets_the_client_choose():
    from harvester.replay._reach import Reach

    live, recorded = Reach(Policy(), "live"), Reach(Policy(), "recorded")
    assert live.client_endpoints([]) and live.client_endpoints(["api.openai.com", "*.openai.azure.com"])
    assert live.client_endpoints(["api.anthropic.com:443"])  # a span that said the port
    assert not live.client_endpoints(["localhost:11434"])  # a local Ollama the span named: held to it
    assert not live.client_endpoints(["api.openai.com", "127.0.0.1:8000"])  # the span named its server
    assert not recorded.client_endpoints([]) and not recorded.client_endpoints(["api.openai.com"])
    assert Reach(Policy(), "recorded-then-live").client_endpoints(["api.anthropic.com"])
    # code without a case's context: every case's hosts, and the client's choice where some case lets it
    suite = live.suite([["127.0.0.1:8000"], ["api.openai.com"]])
    assert suite.allows_host("127.0.0.1", 8000) and suite.model_endpoint is not None
    assert live.suite([["127.0.0.1:8000"]]).model_endpoint is None and recorded.suite([[]]).hosts == ()


def test_a_clients_endpoint_is_the_host_and_port_the_seal_sees():
    """The port its scheme implies, an IPv6 address in brackets, an international name as it is looked
    up (IDNA), as the seal's refusal names them."""
    from harvester.conventions._frameworks._client_calls import endpoint

    seen = {url: endpoint(OpenAI(base_url=url, api_key="sk-test")) for url in ENDPOINTS}
    assert seen == ENDPOINTS


ENDPOINTS = {
    "https://api.openai.com/v1": "api.openai.com:443",
    "http://127.0.0.1:8000/v1": "127.0.0.1:8000",
    "http://[::1]:8000/v1": "[::1]:8000",
    "https://münchen.example/v1": "xn--mnchen-3ya.example:443",
}


@pytest.mark.parametrize(
    ("provider", "model", "hosts"),
    [
        ("together", "meta-llama/Llama-3.3-70B", ["api.together.ai", "api.together.xyz"]),
        ("ollama", "llama3.2", ["localhost:11434", "127.0.0.1:11434"]),  # ChatOllama's spans
        ("fireworks", None, ["api.fireworks.ai"]),
        (None, "claude-sonnet-4-5", ["api.anthropic.com"]),  # no provider said: the model's name
        (None, "Qwen/Qwen2.5-Coder-32B-Instruct", []),  # smolagents' InferenceClientModel: nothing said
    ],
)
def test_a_provider_openinference_names_is_its_documented_host(provider, model, hosts):
    """What a case records when its spans name only a provider; a case that records none may reach every
    documented host, Hugging Face's among them."""
    from harvester.conventions import EVERY_PROVIDER_HOST, model_hosts
    from harvester.model import LlmCall, Run

    run = Run(trace_id="t", llm_calls=[LlmCall(model=model, provider=provider)])
    assert model_hosts([run]) == hosts
    assert "router.huggingface.co" in EVERY_PROVIDER_HOST
    # a case that holds no host may reach every provider's, but no port of this machine (Ollama's)
    assert set(hosts) <= set(EVERY_PROVIDER_HOST) if provider != "ollama" else not set(hosts) & set(EVERY_PROVIDER_HOST)


def test_a_guard_over_an_instrumentors_wrapper_keeps_its_instance():
    """An instrumentor's wrapt wrapper on a client class (OpenInference's on ``OpenAI.request``) passes
    ``inspect.isfunction``; guarded as a plain function it was called unbound and saw no instance, so
    it traced nothing. (The replay above meets it only when the app instrumented first in a process.)"""
    import wrapt

    from harvester.conventions._frameworks._patch import guard

    seen: list[Any] = []

    class Client:
        def request(self, path: str) -> str:
            return path

    def tracing(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        seen.append(instance)
        return wrapped(*args, **kwargs)

    class Instrumented(Client):
        pass

    Instrumented.request = wrapt.FunctionWrapper(Client.request, tracing)  # type: ignore[method-assign]
    assert guard(Instrumented, "request", lambda original: lambda self, *a, **kw: original(self, *a, **kw))
    client = Instrumented()
    assert client.request("/chat/completions") == "/chat/completions" and seen == [client]
