"""Raw SDK loops (the OpenAI and Anthropic clients called in the app's own loop, a dict of plain functions)
read and guarded like frameworks: production capture, incident, accept, then replay.

Production instruments the client in its entry point (``serve``), which replay never runs: replay turns
the recorded instrumentor on itself. The app as OpenInference documents it (``build``) runs its tools
for real in replay, and every such call must fail the case by name; the app as docs/own-loop.md writes
it (``build_documented``) replays green with no live call, and red for each regression. Every tool
body counts its real runs in ``shop.LIVE``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from openai import OpenAI
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from harvester import adapters
from harvester.adapters import Session
from harvester.case import load_cases
from harvester.conventions._frameworks import _clients as clients
from harvester.intake import HarvestingSpanProcessor
from harvester.replay import replay as replay_cases
from harvester.report import Report
from harvester.store import TraceStore
from tests.apps import raw_anthropic_app, raw_openai_app, shop
from tests.builders.capture import production_environment
from tests.builders.project import CONFIG as SHOP_CONFIG
from tests.builders.project import accept_incident, cli, enter_project
from tests.builders.sdk_http import MODEL, RAW_LOOPS, http_client, model_server

CONFIG = SHOP_CONFIG + '[prices."gpt-4o-mini"]\ninput = 1.0\noutput = 2.0\n'
CONFIG += '[prices."claude-sonnet-4-5"]\ninput = 1.0\noutput = 2.0\n'
APPS = {"openai": raw_openai_app, "anthropic": raw_anthropic_app}
LOOPS = RAW_LOOPS
SCOPES = {
    ("openai", "openinference"): "openinference.instrumentation.openai",
    ("openai", "openllmetry"): "opentelemetry.instrumentation.openai.v1",
    ("anthropic", "openinference"): "openinference.instrumentation.anthropic",
    ("anthropic", "openllmetry"): "opentelemetry.instrumentation.anthropic",
    ("openai", "otel-genai"): "opentelemetry.instrumentation.openai_v2",
}
# The scope an instrumentor's spans carry, where it is not the instrumentor's own: OpenTelemetry's writes
# through opentelemetry-util-genai, whose scope names no client (the case remembers the instrumentor).
PRODUCED = {SCOPES[("openai", "otel-genai")]: "opentelemetry.util.genai.handler"}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    raw_openai_app.unwrap_leftovers()  # what OpenLLMetry's uninstrument left on the client, before and after
    yield enter_project(tmp_path, monkeypatch, config=CONFIG)
    raw_openai_app.unwrap_leftovers()


def loop(monkeypatch: pytest.MonkeyPatch, app: str, api: str, client: str, instrumentor: str) -> Any:
    """The app module, set to the API, client and production instrumentor of this loop."""
    monkeypatch.setenv(raw_openai_app.API_ENV, api)
    monkeypatch.setenv(raw_openai_app.CLIENT_ENV, client)
    monkeypatch.setenv(raw_openai_app.INSTRUMENTOR_ENV, instrumentor)
    return APPS[app]


def harvested(module: Any, factory: str, scope: str) -> Any:
    """One production request captured, made an incident case and accepted; returns the case."""
    provider = TracerProvider(resource=Resource({"service.name": "support"}))
    processor = HarvestingSpanProcessor("traces.db", redact=False)
    provider.add_span_processor(processor)
    with production_environment():
        module.serve(provider, getattr(module, factory))
    processor.shutdown()
    assert shop.LIVE == {"kb_search": 1, "get_order": 1}, "production ran the real tools"
    shop.LIVE.clear()
    with TraceStore("traces.db") as ts:
        (run,) = ts.runs()
    assert run.trajectory() == ["kb_search", "get_order"] and all(c.status == "ok" for c in run.calls), run.calls
    assert len(run.llm_calls) == 2 and run.llm_calls[0].requests
    assert run.instrumentation == [PRODUCED.get(scope, scope)]
    accept_incident(run.trace_id, "the order answer must come from the order lookup")
    (case,) = load_cases("cases")
    assert case.recorded.instrumentation == [scope]  # the case remembers what traced its model calls
    assert case.recorded.cost is not None and case.recorded.cost >= 0.24  # two model calls, 100+10 tokens each
    return case


def replay(monkeypatch: pytest.MonkeyPatch, target: str, variant: str) -> tuple[int, Any]:
    monkeypatch.setenv(shop.VARIANT_ENV, variant)
    out = cli("replay", "--agent", target, "--report", f"{variant}.json")
    (result,) = Report.load(f"{variant}.json").results
    return out.exit_code, result


def live_detail(result: Any) -> str:
    (check,) = [c for c in result.checks if c.name == "live_tool_call"]
    assert check.passed is False
    return check.detail


@pytest.mark.parametrize(("app", "api", "client", "instrumentor"), LOOPS, ids=["-".join(p) for p in LOOPS])
def test_the_documented_loop_replays_hermetically(
    app: str, api: str, client: str, instrumentor: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = loop(monkeypatch, app, api, client, instrumentor)
    case = harvested(module, "build_documented", SCOPES[(app, instrumentor)])
    target = f"{module.__name__}:build_documented"

    code, r = replay(monkeypatch, target, "baseline")
    assert code == 0 and r.passed, r.reasons()
    assert r.trajectory == ["kb_search", "get_order"] and r.live_calls == 0 and r.no_fixture == 0
    assert r.cost == pytest.approx(case.recorded.cost)  # both model calls read: replay traced the client
    assert not module.instrumentor().is_instrumented_by_opentelemetry  # turned on for the replay, then off

    code, r = replay(monkeypatch, target, "skipped")
    assert code == 1 and not r.passed and r.live_calls == 0
    assert any(c.name.startswith("trajectory_match") and not c.passed and "get_order" in c.detail for c in r.checks), (
        r.reasons()
    )

    code, r = replay(monkeypatch, target, "new_args")
    assert code == 1 and not r.passed and r.no_fixture == 1 and r.live_calls == 0
    (call,) = r.no_fixture_calls
    assert call.tool == "get_order" and call.args == {"order_id": "A1002"}

    code, r = replay(monkeypatch, target, "mutating")
    assert code == 1 and not r.passed and r.unauthorised == 1 and r.live_calls == 0
    assert any(c.name == "never_used(issue_refund)" and not c.passed for c in r.checks), r.reasons()

    assert not shop.LIVE, f"a replay ran live tools: {dict(shop.LIVE)}"


@pytest.mark.parametrize("client", ["sync", "async-stream"])
def test_a_loop_whose_client_points_at_a_local_model_replays_against_it(
    client: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``base_url`` at a model served on 127.0.0.1 (a gateway, vLLM, a local server), over real sockets:
    OpenInference's spans name only the provider, so the case holds ``api.openai.com``; the sealed
    replay reaches the model the client points at, through the client, and regressions stay red."""
    module = loop(monkeypatch, "openai", "chat", client, "openinference")
    with model_server("chat", shop.STEPS["baseline"]) as production:
        monkeypatch.setenv(raw_openai_app.MODEL_URL_ENV, f"{production.origin}/v1")
        case = harvested(module, "build_documented", SCOPES[("openai", "openinference")])
    assert case.recorded.model_hosts == ["api.openai.com"] and len(production.seen) == 2
    target = f"{module.__name__}:build_documented"
    for variant, passed in (("baseline", True), ("mutating", False)):
        with model_server("chat", shop.STEPS[variant]) as model:  # another port than production's
            monkeypatch.setenv(raw_openai_app.MODEL_URL_ENV, f"{model.origin}/v1")
            code, r = replay(monkeypatch, target, variant)
        assert (code == 0) is passed and r.passed is passed and r.live_calls == 0, r.reasons()
        assert not any(c.name == "sealed" for c in r.checks) and len(model.seen) == len(shop.STEPS[variant])
    assert any(c.name == "never_used(issue_refund)" and not c.passed for c in r.checks), r.reasons()
    assert not shop.LIVE, f"a replay ran live tools: {dict(shop.LIVE)}"


@pytest.mark.parametrize(("app", "api", "client", "instrumentor"), LOOPS, ids=["-".join(p) for p in LOOPS])
def test_the_unchanged_loop_fails_naming_every_live_call(
    app: str, api: str, client: str, instrumentor: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No harvester decorator: the tools run for real, and each such call fails the case by name."""
    module = loop(monkeypatch, app, api, client, instrumentor)
    harvested(module, "build", SCOPES[(app, instrumentor)])

    code, r = replay(monkeypatch, f"{module.__name__}:build", "mutating")
    assert shop.LIVE == {"kb_search": 1, "get_order": 1, "issue_refund": 1}  # nothing served them
    assert code == 1 and not r.passed and r.live_calls == 3 and r.unauthorised == 1
    detail = live_detail(r)
    for name in ("kb_search", "get_order", "issue_refund"):
        assert f"{name}(" in detail
    assert detail.count("ran for real") == 3


@pytest.mark.parametrize(
    ("app", "api", "client", "instrumentor"), [LOOPS[1], LOOPS[7], LOOPS[10]], ids=["openai", "anthropic", "otel"]
)
def test_a_requested_call_no_span_shows_is_unserved(
    app: str, api: str, client: str, instrumentor: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The functions dispatched bare: only the model's spans (the instrumentor replay turned on) say
    what it asked for, and each request the executor never served fails the case."""
    module = loop(monkeypatch, app, api, client, instrumentor)
    harvested(module, "build", SCOPES[(app, instrumentor)])
    bare = {"openai": raw_openai_app.build_bare, "anthropic": raw_anthropic_app.build_bare}[app]
    code, r = replay(monkeypatch, f"{module.__name__}:{bare.__name__}", "baseline")
    assert shop.LIVE == {"kb_search": 1, "get_order": 1}
    assert code == 1 and not r.passed and r.live_calls == 2, r.reasons()
    assert live_detail(r).count("was requested and never reached the executor") == 2
    # OpenTelemetry's instrumentor records content as the environment says at each call: the replay
    # set it (production's environment is not the replay's) and put it back after.
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" not in os.environ


def test_tool_spans_without_a_run_are_the_runs_calls(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A case that does not say what traced its model calls (harvested before cases said so): replay
    turns nothing on, the loop's CHAIN span is no run, and the tool spans are still read as its calls."""
    module = loop(monkeypatch, *LOOPS[0])
    path = Path("cases") / f"{harvested(module, 'build', SCOPES[('openai', 'openinference')]).id}.json"
    data = orjson.loads(path.read_bytes())
    data["recorded"]["instrumentation"] = []
    path.write_bytes(orjson.dumps(data))
    code, r = replay(monkeypatch, f"{module.__name__}:build", "baseline")
    assert shop.LIVE == {"kb_search": 1, "get_order": 1}
    assert code == 1 and r.live_calls == 2 and live_detail(r).count("ran for real") == 2


def test_an_instrumentor_replay_cannot_turn_on_fails_the_case_hermetic(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorded instrumentor is not installed where replay runs and nothing else traces the client:
    the model's requests are invisible, so the case cannot be judged (never "0 live calls")."""
    module = loop(monkeypatch, *LOOPS[0])
    case_id = harvested(module, "build", SCOPES[("openai", "openinference")]).id
    missing = ("openinference.instrumentation.openai_gone", "OpenAIInstrumentor")
    (openai_client, *others) = clients.CLIENTS
    gone = clients.Client("openai", openai_client.ROOTS, (missing,))
    monkeypatch.setattr(clients, "CLIENTS", (gone, *others))  # where the session and its check read it
    monkeypatch.setattr(adapters, "CLIENTS", (gone, *others))
    path = Path("cases") / f"{case_id}.json"
    data = orjson.loads(path.read_bytes())
    data["recorded"]["instrumentation"] = [missing[0]]
    path.write_bytes(orjson.dumps(data))
    code, r = replay(monkeypatch, f"{module.__name__}:build_bare", "baseline")
    assert code != 0 and not r.passed and r.errored
    (check,) = [c for c in r.checks if c.name == "hermetic"]
    assert check.passed is False and missing[0] in check.detail


def test_replay_leaves_a_client_the_app_traces_itself_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The app turned OpenInference on itself: a recording made with OpenLLMetry turns no second one on."""
    import openai  # noqa: F401  (the client is in use)
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor as Traceloop

    ours = OpenAIInstrumentor()
    ours.instrument()
    session = Session()
    try:
        session.open([SCOPES[("openai", "openllmetry")]])
        assert not Traceloop().is_instrumented_by_opentelemetry
        assert session.untraced([SCOPES[("openai", "openllmetry")]]) == []
        session.close()
        assert ours.is_instrumented_by_opentelemetry  # not ours to turn off
    finally:
        session.close()
        ours.uninstrument()


def test_requests_the_executor_served_are_served_calls(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop with no span of its own that hands each request to the executor it is given: the model's
    spans are the run, and each request they show unanswered is the call the executor served."""
    module = loop(monkeypatch, *LOOPS[0])
    harvested(module, "build", SCOPES[("openai", "openinference")])

    def factory(tools: Any) -> Any:
        client = OpenAI(
            api_key="sk-test",
            base_url="http://openai.invalid/v1",
            http_client=http_client("chat", shop.STEPS["baseline"]),
        )
        schemas = [{"type": "function", "function": s} for s in raw_openai_app.SCHEMAS]

        def agent(prompt: str) -> str | None:
            messages: list[Any] = [{"role": "user", "content": prompt}]
            while True:
                reply = client.chat.completions.create(model=MODEL["chat"], messages=messages, tools=schemas)
                message = reply.choices[0].message
                if not message.tool_calls:
                    return message.content
                messages.append(message.model_dump(exclude_none=True))
                for call in message.tool_calls:
                    result = tools.execute(call.function.name, json.loads(call.function.arguments))
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})

        return agent

    (r,) = replay_cases(load_cases("cases"), factory).results
    assert r.passed and r.live_calls == 0, r.reasons()
    assert r.trajectory == ["kb_search", "get_order"] and r.tool_calls == 2


@pytest.mark.parametrize(("app", "api", "client", "instrumentor"), LOOPS, ids=["-".join(p) for p in LOOPS])
def test_the_documented_loop_replays_with_the_recorded_model(
    app: str, api: str, client: str, instrumentor: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--model recorded`` with no model (the client's transport has no script: a request fails): both
    model calls are answered from the case, through the SDK itself, and the verdict is the live one's."""
    module = loop(monkeypatch, app, api, client, instrumentor)
    case = harvested(module, "build_documented", SCOPES[(app, instrumentor)])
    assert len(case.model_fixtures) == 2 and case.model_fixtures[0].request is not None
    monkeypatch.setenv(shop.VARIANT_ENV, "no_model")
    out = cli("replay", "--agent", f"{module.__name__}:build_documented", "--model", "recorded", "--report", "r.json")
    (r,) = Report.load("r.json").results
    assert out.exit_code == 0 and r.passed, r.reasons()
    assert r.model is not None and r.model.served == 2 and r.model.drift is None, r.model
    assert r.trajectory == ["kb_search", "get_order"] and r.live_calls == 0

    monkeypatch.setenv(shop.CHANGE_ENV, "system")  # the loop's instructions changed since production
    out = cli("replay", "--agent", f"{module.__name__}:build_documented", "--model", "recorded", "--report", "r.json")
    (r,) = Report.load("r.json").results
    assert out.exit_code == 1 and not r.passed and r.model is not None and r.model.served == 0
    (check,) = [c for c in r.checks if c.name == "model_input_changed"]
    assert check.detail.startswith('model_input_changed at step 1: system prompt: -"You are the shop'), check.detail

    monkeypatch.setenv(shop.CHANGE_ENV, "result")  # how the loop hands a tool's result to the model changed
    out = cli("replay", "--agent", f"{module.__name__}:build_documented", "--model", "recorded", "--report", "r.json")
    (r,) = Report.load("r.json").results
    (check,) = [c for c in r.checks if c.name == "model_input_changed"]
    assert out.exit_code == 1 and check.detail.startswith("model_input_changed at step 2: message "), check.detail
    assert '+"{\\"result\\":' in check.detail, check.detail

    monkeypatch.setenv(shop.CHANGE_ENV, "system")
    monkeypatch.setenv(shop.VARIANT_ENV, "baseline")  # the live (offline) model answers from the drift on
    mode = "recorded-then-live"
    out = cli("replay", "--agent", f"{module.__name__}:build_documented", "--model", mode, "--report", "r.json")
    (r,) = Report.load("r.json").results
    assert out.exit_code == 0 and r.passed and r.model is not None and r.model.live_from == 1, r.reasons()
    assert r.trajectory == ["kb_search", "get_order"] and r.live_calls == 0
    assert not shop.LIVE, f"a replay ran live tools: {dict(shop.LIVE)}"


# (app, API, instrumentor, form): loops that ask in a form of their own, replayed with the recorded model.
FORMS = [
    ("openai", "chat", "openinference", "parse"),  # the strict schema parse() sends is the one compared
    ("openai", "chat", "openllmetry", "parse"),
    ("openai", "responses", "openinference", "parse"),
    ("openai", "chat", "openinference", "moderated"),  # a moderation call is no model turn
    ("anthropic", "messages", "openinference", "blocks"),  # a tool result as text blocks is its text
    ("anthropic", "messages", "openllmetry", "blocks"),
]


@pytest.mark.parametrize(("app", "api", "instrumentor", "form"), FORMS, ids=["-".join(p) for p in FORMS])
def test_a_loop_asking_in_a_form_of_its_own_replays_with_the_recorded_model(
    app: str, api: str, instrumentor: str, form: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unchanged loop's requests read as the recording's, whatever form it asks in, so every model
    call is served and none drifts."""
    monkeypatch.setenv(raw_openai_app.FORM_ENV, form)
    module = loop(monkeypatch, app, api, "sync", instrumentor)
    case = harvested(module, "build_documented", SCOPES[(app, instrumentor)])
    assert len(case.model_fixtures) == 2 and not [n for n in case.review_notes if "capture" in n], case.review_notes
    assert case.history == [] and case.prompt == shop.PROMPT
    monkeypatch.setenv(shop.VARIANT_ENV, "no_model")
    out = cli("replay", "--agent", f"{module.__name__}:build_documented", "--model", "recorded", "--report", "r.json")
    (r,) = Report.load("r.json").results
    if form == "moderated":  # not in the recording, and no model host is reachable: refused, as documented
        (sealed,) = [c for c in r.checks if c.name == "sealed"]
        assert (
            out.exit_code == 1
            and "connect to openai.invalid:80 during span 'ModerationCreateResponse'" in sealed.detail
        )
        return
    assert out.exit_code == 0 and r.passed, r.reasons()
    assert r.model is not None and r.model.served == 2 and r.model.drift is None, r.model
