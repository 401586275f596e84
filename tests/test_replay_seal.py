"""The seal: while a replay runs, no connection and no process leaves the agent's process unless the case
expects it, whatever client made it; a refusal fails the case naming the host (or command) and the tool
call in flight, and the server on the other side receives nothing."""

from __future__ import annotations

import _thread
import contextvars
import queue
import re
import socket
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from harvester.case import AgentCase, save_case
from harvester.cli import main
from harvester.replay import Finished, replay
from harvester.replay._policy import Policy
from harvester.replay._reach import Reach
from harvester.report import Report, evaluate_gates, render_html
from tests.apps import leaky_app
from tests.builders.backends import Loopback, loopback, routes
from tests.builders.cli import one_line_error

CLIENTS = ("httpx", "requests", "urllib", "socket", "asyncio", "subprocess")


@pytest.fixture
def payments(monkeypatch: pytest.MonkeyPatch) -> Iterator[Loopback]:
    """The payments service on 127.0.0.1: every request that reaches it is in ``seen``."""
    with loopback(routes({"/refund": {"refunded": "A1001"}})) as server:
        monkeypatch.setenv(leaky_app.URL_ENV, f"{server.origin}/refund")
        yield server


def refund_case(**recorded: object) -> AgentCase:
    return AgentCase.model_validate(
        {
            "id": "refund",
            "status": "accepted",
            "prompt": "Refund order A1001",
            "why": "refunds go through the payments service",
            "recorded": {"trajectory": ["issue_refund"], "stop": "answered", **recorded},
        }
    )


def counted_once(report: Report, finished: list[Finished]) -> None:
    """One refusal, counted once: in the case's ``live_tool_calls``, not again as made outside any case."""
    sealed = [c for f in finished for o in f.outcomes for c in o.live or () if c.how == "sealed"]
    assert len(sealed) == 1, [c.summary() for c in sealed]
    assert report.refused == 0 and "outside any case" not in report.summary(), report.refused_calls
    assert report.metrics()["live_tool_calls"] == sum(r.live_calls for r in report.results)


def failed(report: Report, name: str) -> str:
    (result,) = report.results
    check = next((c for c in result.checks if c.name == name and c.passed is False), None)
    assert check is not None, f"no failed {name} check in {[(c.name, c.detail) for c in result.checks]}"
    return check.detail


@pytest.mark.parametrize("client", CLIENTS)
def test_every_client_is_refused_and_the_service_receives_nothing(payments, monkeypatch, client):
    monkeypatch.setenv(leaky_app.CLIENT_ENV, client)
    report = replay([refund_case()], leaky_app.build, timeout=30)
    assert payments.seen == []
    detail = failed(report, "sealed")
    if client == "subprocess":
        assert f"start {sys.executable} -c import urllib.request" in detail
        assert "not in replay.allow_commands" in detail
    else:
        assert f"connect to 127.0.0.1:{payments.port} during issue_refund: not a model host" in detail
    assert "harvester replay sealed" in (report.results[0].answer or "")  # the agent saw the refusal
    assert report.results[0].live_calls >= 1
    assert report.metrics()["live_tool_calls"] >= 1


def test_a_host_that_does_not_resolve_is_refused_by_name(payments, monkeypatch):
    """Offline, the lookup would fail anyway: the seal still names the host the agent tried to reach."""
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "name")
    report = replay([refund_case()], leaky_app.build, timeout=30)
    assert "connect to api.payments.invalid:443 during issue_refund: not a model host" in failed(report, "sealed")


def test_a_model_host_of_the_recording_is_allowed(payments, monkeypatch):
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "httpx")
    for host in (f"127.0.0.1:{payments.port}", f"localhost:{payments.port}"):
        if host.startswith("localhost"):  # a name: its lookup is allowed, and so are the addresses it gave
            monkeypatch.setenv(leaky_app.URL_ENV, f"http://localhost:{payments.port}/refund")
        before = len(payments.seen)
        report = replay([refund_case(model_hosts=[host])], leaky_app.build, timeout=30)
        assert len(payments.seen) == before + 1, host
        assert not [c for c in report.results[0].checks if c.name == "sealed"], host
        assert "refunded" in (report.results[0].answer or "")


def test_a_model_host_recorded_without_its_port_is_reached_at_the_web_ports_only(payments, monkeypatch):
    """A span leaves the scheme's default port out (pydantic-ai's ``server.address`` for
    ``http://localhost/v1``): the model was at HTTP's or HTTPS's port, and any other port of the host
    (an internal service beside it) stays refused. ``allow_hosts`` without a port is still any port."""
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "httpx")
    monkeypatch.setenv(leaky_app.URL_ENV, f"http://localhost:{payments.port}/refund")
    for host in ("localhost", "127.0.0.1"):
        report = replay([refund_case(model_hosts=[host])], leaky_app.build, timeout=30)
        assert f"connect to localhost:{payments.port} during issue_refund" in failed(report, "sealed"), host
        policy = Reach(Policy(), "live").case([host])
        assert [policy.allows_host(host, port) for port in (80, 443, payments.port)] == [True, True, False]
    assert payments.seen == []
    report = replay([refund_case()], leaky_app.build, timeout=30, allow_hosts=["localhost"])
    assert len(payments.seen) == 1 and not [c for c in report.results[0].checks if c.name == "sealed"]


def test_allow_hosts_lets_a_named_host_through_and_nothing_else(payments, monkeypatch):
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "requests")
    monkeypatch.setenv(leaky_app.URL_ENV, f"http://localhost:{payments.port}/refund")
    wrong_port = replay([refund_case()], leaky_app.build, timeout=30, allow_hosts=[f"localhost:{payments.port + 1}"])
    assert payments.seen == []
    assert f"connect to localhost:{payments.port} during issue_refund" in failed(wrong_port, "sealed")
    report = replay([refund_case()], leaky_app.build, timeout=30, allow_hosts=[f"localhost:{payments.port}"])
    assert len(payments.seen) == 1
    assert not [c for c in report.results[0].checks if c.name == "sealed"]


def test_allow_commands_lets_a_listed_command_start(payments, monkeypatch):
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "subprocess")
    report = replay(
        [refund_case(model_hosts=[f"127.0.0.1:{payments.port}"])],
        leaky_app.build,
        timeout=60,
        allow_commands=[f"{sys.executable} -c"],
    )
    assert len(payments.seen) == 1  # the listed command ran (a child that is not Python is not sealed)
    assert not [c for c in report.results[0].checks if c.name == "sealed"]


def test_a_python_child_of_an_allowed_command_inherits_the_seal(payments, monkeypatch):
    """The listed command starts, but the process it is seals itself: its refund never leaves, and the
    case fails naming what the child tried."""
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "subprocess")
    report = replay([refund_case()], leaky_app.build, timeout=60, allow_commands=[f"{sys.executable} -c"])
    assert payments.seen == []
    detail = failed(report, "sealed")
    assert f"connect to 127.0.0.1:{payments.port} during process {sys.executable} -c" in detail
    assert "returned non-zero exit status" in (report.results[0].answer or "")
    finished: list[Finished] = []
    again = replay(
        [refund_case()], leaky_app.build, timeout=60, allow_commands=[f"{sys.executable} -c"], on_case=finished.append
    )
    counted_once(again, finished)  # the child the case started is the case's


def test_a_forked_child_inherits_the_seal(payments, monkeypatch):
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "fork")
    finished: list[Finished] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() in a threaded process: the child only posts
        report = replay([refund_case()], leaky_app.build, timeout=30, on_case=finished.append)
    assert payments.seen == []
    answer = report.results[0].answer or ""
    assert f"harvester replay sealed connect to 127.0.0.1:{payments.port}" in answer
    assert f"connect to 127.0.0.1:{payments.port} during issue_refund" in failed(report, "sealed")
    counted_once(report, finished)


def test_a_thread_without_the_case_context_meets_the_suite_seal(payments, monkeypatch):
    """The app's worker thread started at import has no case: it is held to what every case may reach,
    and its refusal fails the case in flight and is counted once, there. One made while no case is in
    flight (here: a bare thread started when a case has finished) is the report's, once."""
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "thread")
    finished: list[Finished] = []
    report = replay(
        [refund_case(model_hosts=[f"127.0.0.1:{payments.port + 1}"])],
        leaky_app.build,
        timeout=30,
        on_case=finished.append,
    )
    assert payments.seen == []
    assert f"connect to 127.0.0.1:{payments.port}" in failed(report, "sealed")
    counted_once(report, finished)

    def after_its_case(done: Finished) -> None:
        """The callback is the caller's own work (not sealed); a bare thread it starts has no context."""
        said: queue.SimpleQueue[str] = queue.SimpleQueue()

        def connect() -> None:
            try:
                socket.create_connection(("127.0.0.1", payments.port), timeout=5).close()
                said.put("connected")
            except PermissionError as exc:
                said.put(str(exc))

        _thread.start_new_thread(connect, ())
        assert said.get(timeout=10).startswith("harvester replay sealed connect")

    outside = replay([refund_case()], leaky_app.build, timeout=30, on_case=after_its_case)
    assert payments.seen == []
    assert outside.refused == 1 and outside.refused_calls[0].startswith("sealed connect to 127.0.0.1")
    assert "made outside any case: sealed connect" in outside.summary()
    assert outside.metrics()["live_tool_calls"] == outside.results[0].live_calls + 1


def test_a_refusal_no_case_context_made_fails_every_case_in_flight_and_counts_once(payments):
    """Two cases in flight when code without either's context is refused: both fail naming it, and it is
    counted once, not once per case plus once more in the report."""
    both = threading.Barrier(2)

    def build():
        def agent(prompt: str) -> str:
            both.wait(timeout=20)  # both cases started
            if prompt == "first":
                with pytest.raises(PermissionError, match="harvester replay sealed connect"):
                    contextvars.Context().run(socket.create_connection, ("127.0.0.1", payments.port), 5)
            both.wait(timeout=20)  # both still in flight
            return "done"

        return agent

    cases = [AgentCase.model_validate({"id": p, "status": "accepted", "prompt": p}) for p in ("first", "second")]
    report = replay(cases, build, timeout=30, concurrency=2)
    assert payments.seen == []
    for result in report.results:
        sealed = next(c for c in result.checks if c.name == "sealed" and c.passed is False)
        assert f"connect to 127.0.0.1:{payments.port}" in sealed.detail, result.id
    assert report.refused == 0
    assert report.metrics()["live_tool_calls"] == 1


@pytest.mark.parametrize("how", ["run", "fork"])
def test_a_child_process_refused_fails_only_the_case_that_started_it(payments, how):
    """Two cases in flight; one starts a process (a Python child, or a fork) that is refused: that case
    fails naming it, the other passes, and it counts once. The child is held to its own case's hosts."""
    import os
    import subprocess

    both = threading.Barrier(2)
    connect = f"import socket; socket.create_connection(('127.0.0.1', {payments.port}), 5)"

    def build():
        def agent(prompt: str) -> str:
            both.wait(timeout=20)  # both cases started
            if prompt == "first" and how == "run":
                subprocess.run([sys.executable, "-c", connect], capture_output=True, timeout=60)
            elif prompt == "first":
                pid = os.fork()
                if pid == 0:
                    try:
                        socket.create_connection(("127.0.0.1", payments.port), 5)
                    finally:
                        os._exit(0)
                os.waitpid(pid, 0)
            both.wait(timeout=60)  # both still in flight
            return "done"

        return agent

    cases = [AgentCase.model_validate({"id": p, "status": "accepted", "prompt": p}) for p in ("first", "second")]
    report = replay(cases, build, timeout=90, concurrency=2, allow_commands=[f"{sys.executable} -c"])
    assert payments.seen == []
    first, second = report.results
    (sealed,) = [c for c in first.checks if c.name == "sealed" and c.passed is False]
    assert f"connect to 127.0.0.1:{payments.port}" in sealed.detail and first.live_calls == 1
    assert not any(c.name == "sealed" for c in second.checks) and second.live_calls == 0
    assert report.metrics()["live_tool_calls"] == 1 and report.refused == 0


def test_telemetry_the_sdk_exports_passes_the_seal(payments, monkeypatch):
    """An app exporting its spans (OTLP over HTTP, from inside the case) is not an action on the world."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    def build():
        def agent(prompt: str) -> str:
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{payments.origin}/v1/traces")))
            with provider.get_tracer("app").start_as_current_span("work"):
                pass
            provider.shutdown()
            return "exported"

        return agent

    case = AgentCase.model_validate({"id": "telemetry", "status": "accepted", "prompt": "hi"})
    report = replay([case], build, timeout=30)
    assert [s.path for s in payments.seen] == ["/v1/traces"]
    assert report.results[0].passed, report.summary()


def test_no_seal_lets_everything_through_and_says_so_everywhere(payments, monkeypatch, tmp_path):
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "httpx")
    report = replay([refund_case()], leaky_app.build, timeout=30, seal=False)
    assert len(payments.seen) == 1
    assert report.sealed is False
    line = "warning: replayed without the seal (--no-seal)"
    assert line in report.summary()
    assert line in report.to_markdown()
    report.save(tmp_path / "r.json")
    assert line in Report.load(tmp_path / "r.json").summary()
    assert line in render_html(report, None, evaluate_gates(report, []))
    sealed = replay([refund_case()], leaky_app.build, timeout=30)
    assert sealed.sealed is True and line not in sealed.summary()


def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str = "") -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(f"[tool.harvester]\n{config}")
    (tmp_path / "cases").mkdir(exist_ok=True)
    save_case(refund_case(), tmp_path / "cases")
    return tmp_path


def test_the_cli_refuses_then_allows_with_allow_host_and_config(payments, monkeypatch, tmp_path):
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "urllib")
    _project(tmp_path, monkeypatch)
    agent = ["replay", "--agent", "tests.apps.leaky_app:build", "--timeout", "30"]
    refused = CliRunner().invoke(main, agent)
    assert refused.exit_code == 1, refused.output
    assert f"sealed: refused connect to 127.0.0.1:{payments.port} during issue_refund" in refused.output
    assert "live_tool_calls<=0: FAIL" in refused.output
    assert payments.seen == []
    allowed = CliRunner().invoke(main, [*agent, "--allow-host", f"127.0.0.1:{payments.port}"])
    assert "sealed:" not in allowed.output and len(payments.seen) == 1
    _project(tmp_path, monkeypatch, f'[tool.harvester.replay]\nallow_hosts = ["127.0.0.1:{payments.port}"]\n')
    configured = CliRunner().invoke(main, agent)
    assert "sealed:" not in configured.output and len(payments.seen) == 2
    unsealed = CliRunner().invoke(main, [*agent, "--no-seal"])
    assert "warning: replayed without the seal (--no-seal)" in unsealed.output


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ('allow_hosts = ["https://api.example.com"]', "tool.harvester.replay.allow_hosts"),
        ('allow_hosts = ["api.example.com:99999"]', "tool.harvester.replay.allow_hosts"),
        ('allow_hosts = ["[:::]"]', "tool.harvester.replay.allow_hosts"),  # brackets hold an IPv6 address
        ('allow_commands = ["  "]', "tool.harvester.replay.allow_commands"),
        ('allow_commands = ["python -c \'x"]', "tool.harvester.replay.allow_commands"),
        ("allow_commands = [\"''\"]", "tool.harvester.replay.allow_commands"),
    ],
)
def test_a_bad_policy_entry_is_one_line_naming_file_and_field(monkeypatch, tmp_path, config, field):
    _project(tmp_path, monkeypatch, f"[tool.harvester.replay]\n{config}\n")
    result = CliRunner().invoke(main, ["replay", "--agent", "tests.apps.leaky_app:build"])
    assert result.exit_code == 2
    line = one_line_error(result, "pyproject.toml", field)
    assert "Traceback" not in line


def test_a_bad_allow_host_option_is_a_usage_error(monkeypatch, tmp_path):
    _project(tmp_path, monkeypatch)
    result = CliRunner().invoke(main, ["replay", "--agent", "tests.apps.leaky_app:build", "--allow-host", "a b"])
    assert result.exit_code == 2
    assert "'a b' is not a host or host:port" in result.output


def test_a_bare_ipv6_address_is_a_host_in_the_config_and_the_option(monkeypatch, tmp_path):
    """docs/seal.md: an IP address is a host entry; IPv6 needs brackets only to carry a port."""
    agent = ["replay", "--agent", "tests.apps.leaky_app:build", "--timeout", "30"]
    for config, option in (('allow_hosts = ["::1"]', []), ("", ["--allow-host", "::1"])):
        _project(tmp_path, monkeypatch, f"[tool.harvester.replay]\n{config}\n")
        result = CliRunner().invoke(main, [*agent, *option])
        assert result.exit_code != 2 and "is not a host" not in result.output, result.output
    bad = CliRunner().invoke(main, [*agent, "--allow-host", "::1::2"])
    assert bad.exit_code == 2 and "'::1::2' is not a host or host:port" in bad.output


def test_a_host_pattern_s_star_inside_a_name_is_one_label():
    """A leading ``*.`` is any subdomain; a ``*`` inside a name (a provider's documented region) is one
    label: ``bedrock-runtime.*.amazonaws.com`` is not an S3 bucket named ``bedrock-runtime.<anything>``."""
    policy = Policy(["bedrock-runtime.*.amazonaws.com", "*.example.com", "api.example.org."])
    allowed = ["bedrock-runtime.us-east-1.amazonaws.com", "a.example.com", "a.b.example.com", "API.example.org"]
    refused = ["bedrock-runtime.evil.s3.amazonaws.com", "example.com", "xexample.com", "api.example.org.evil.com"]
    assert [h for h in allowed + refused if policy.allows_host(h, 443)] == allowed


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"allow_hosts": ["api.example.com", "http://x"]}, "allow_hosts entry 1 'http://x' is not a host"),
        ({"allow_hosts": "api.x.com"}, "allow_hosts must be a list of entries, not the string 'api.x.com'"),
        ({"allow_hosts": [None]}, "allow_hosts entry 0 None is not a string"),
        ({"allow_commands": [""]}, "allow_commands entry 0 '' names no command"),
        ({"allow_commands": ["python -c 'x"]}, 'allow_commands entry 0 "python -c \'x" does not split into words'),
    ],
)
def test_replay_refuses_a_bad_policy_argument_up_front(payments, arguments, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        replay([refund_case()], leaky_app.build, **arguments)
    assert payments.seen == []


def test_replay_checks_an_iterable_of_hosts_and_still_allows_them(payments, monkeypatch):
    """The check reads a generator once and the seal still gets every entry of it."""
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "httpx")
    hosts = (h for h in ["::1", f"127.0.0.1:{payments.port}"])
    report = replay([refund_case()], leaky_app.build, timeout=30, allow_hosts=hosts)
    assert len(payments.seen) == 1
    assert not [c for c in report.results[0].checks if c.name == "sealed"]


COMPLETION = {
    "id": "c1",
    "object": "chat.completion",
    "created": 0,
    "model": "gpt-4.1-mini",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Refunds within 30 days."}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
}


@pytest.mark.slow
def test_the_model_host_a_harvested_case_recorded_is_the_one_it_may_reach():
    """pydantic-ai on the real OpenAI client against a model served on 127.0.0.1: the chat span names the
    endpoint, harvest keeps it in the case, and the replay reaches that model and no other."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from harvester import case_from_run
    from harvester.conventions import runs_from_spans

    def agent_at(origin: str, provider: TracerProvider | None = None) -> Agent:
        model = OpenAIChatModel("gpt-4.1-mini", provider=OpenAIProvider(base_url=f"{origin}/v1", api_key="k"))
        agent = Agent(model, name="support")
        if provider is not None:
            agent.instrument = InstrumentationSettings(tracer_provider=provider)
        return agent

    with loopback(routes({"/v1/chat/completions": COMPLETION})) as model, loopback(routes({})) as other:
        exporter, provider = InMemorySpanExporter(), TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        agent_at(model.origin, provider).run_sync("Can I return A1001?")
        (run,) = runs_from_spans(exporter.get_finished_spans())
        case = case_from_run(run).model_copy(update={"status": "accepted"})
        assert case.recorded.model_hosts == [f"127.0.0.1:{model.port}"]

        report = replay([case], lambda: agent_at(model.origin), timeout=30)
        assert len(model.seen) == 2  # production, then the replay: the recorded model host is allowed
        assert report.results[0].passed, report.summary()

        moved = replay([case], lambda: agent_at(other.origin), timeout=30)
        assert other.seen == []
        assert f"connect to 127.0.0.1:{other.port}" in failed(moved, "sealed")


def test_a_forbidden_tool_stopped_by_the_seal_is_one_unauthorised_action(payments, monkeypatch):
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "httpx")
    report = replay([refund_case().model_copy(update={"forbidden_tools": ["issue_refund"]})], leaky_app.build)
    (result,) = report.results
    assert result.unauthorised == 1  # its tool span ran; the refused connection is the same action
    assert {c.name for c in result.checks if c.passed is False} >= {"sealed", "live_tool_call"}


_BOTH_HOOKS = """
import json, os, sys
from harvester.case import AgentCase
from harvester.replay import _seal, replay
from tests.apps import leaky_app
from tests.builders.backends import loopback, routes

def case(**recorded):
    return AgentCase.model_validate({"id": "refund", "status": "accepted", "prompt": "Refund order A1001",
        "why": "refunds go through the payments service",
        "recorded": {"trajectory": ["issue_refund"], "stop": "answered", **recorded}})

out = {}
with loopback(routes({"/refund": {"refunded": "A1001"}})) as server:
    by_name = f"http://localhost:{server.port}/refund"
    runs = {  # name: (client, url, model hosts, allow_hosts)
        "refused": ("httpx", server.origin + "/refund", [], []),
        "refused by name": ("requests", by_name, [f"localhost:{server.port + 1}"], []),
        "model host by name": ("httpx", by_name, [f"localhost:{server.port}"], []),
        "model host without its port": ("httpx", by_name, ["localhost"], []),
        "allowed without a port": ("httpx", by_name, [], ["localhost"]),
        "model host by address": ("urllib", server.origin + "/refund", [f"127.0.0.1:{server.port}"], []),
        "allowed by pattern": ("requests", by_name, [f"*host:{server.port}"], []),
        "asyncio": ("asyncio", by_name, [f"localhost:{server.port}"], []),
        "a name given to connect": ("connect-name", f"http://refunds.exfil.invalid:{server.port}/", [], []),
        "a name given to connect as bytes": ("connect-bytes", by_name, [f"localhost:{server.port}"], []),
        "syslog": ("syslog", by_name, [], []),
        "syslog allowed": ("syslog", by_name, [], ["unix:/dev/log"]),
    }
    for label, (client, url, hosts, allow) in runs.items():
        os.environ[leaky_app.CLIENT_ENV], os.environ[leaky_app.URL_ENV] = client, url
        before = len(server.seen)
        for _ in range(2):  # the second time, what the first allowed is decided without Python
            report = replay([case(model_hosts=hosts)], leaky_app.build, timeout=30, allow_hosts=allow)
        sealed = [c.detail.replace(str(server.port), "PORT") for c in report.results[0].checks if c.name == "sealed"]
        out[label] = {"reached": len(server.seen) - before, "sealed": sealed}
out["hook"] = _seal.installed()
print(json.dumps(out))
"""


def test_the_c_hook_and_the_python_hook_decide_alike():
    """The C hook decides what the policy allows as it stands and leaves the rest to the Python checks;
    ``HARVESTER_SEAL_HOOK=python`` makes the Python hook the whole seal. Both, each in a process of its
    own (a hook cannot be removed), refuse and allow the same connections, twice over."""
    import json
    import os
    import subprocess

    from harvester.replay import _seal

    seen = {}
    for hook in ("C", "Python"):
        env = {**os.environ, _seal.HOOK_ENV: hook.lower()}
        done = subprocess.run([sys.executable, "-c", _BOTH_HOOKS], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        seen[hook] = json.loads(done.stdout.strip().splitlines()[-1])
    if _seal._hook is None:  # a machine that could not build it: both are the Python hook
        assert os.environ.get("HARVESTER_REQUIRE_NATIVE") != "1", "the C hook was not built (.ci/run requires it)"
        assert seen["C"].pop("hook") == seen["Python"].pop("hook") == "Python"
    else:
        assert (seen["C"].pop("hook"), seen["Python"].pop("hook")) == ("C", "Python")
    assert seen["C"] == seen["Python"]
    runs = seen["C"]
    assert runs["refused"] == {"reached": 0, "sealed": [runs["refused"]["sealed"][0]]}
    assert "connect to 127.0.0.1:PORT during issue_refund: not a model host" in runs["refused"]["sealed"][0]
    assert runs["refused by name"]["reached"] == 0
    assert "connect to localhost:PORT during issue_refund" in runs["refused by name"]["sealed"][0]
    assert runs["model host without its port"]["reached"] == 0  # HTTP's and HTTPS's ports only
    allowed_ones = (
        "model host by name",
        "model host by address",
        "allowed by pattern",
        "asyncio",
        "allowed without a port",
    )
    for allowed in allowed_ones:
        assert runs[allowed] == {"reached": 2, "sealed": []}, allowed
    assert runs["a name given to connect"]["reached"] == 0
    assert "connect to refunds.exfil.invalid:PORT during issue_refund" in runs["a name given to connect"]["sealed"][0]
    assert runs["a name given to connect as bytes"] == {"reached": 2, "sealed": []}
    assert "connect to unix:/dev/log during issue_refund: a local socket" in runs["syslog"]["sealed"][0]
    assert runs["syslog allowed"] == {"reached": 0, "sealed": []}


_VETOED = """
import sys
from harvester.replay import _seal
from harvester.replay._policy import Policy

def veto(event, args):
    if event == "sys.addaudithook":
        raise RuntimeError("no more hooks")  # CPython then reports the hook added, and it is not

sys.addaudithook(veto)
try:
    with _seal.sealing(Policy()):
        print("sealed with", _seal.installed())
except RuntimeError as exc:
    print("refused:", exc)
"""


@pytest.mark.parametrize("hook", ["C", "Python"])
def test_a_hook_another_audit_hook_vetoed_fails_the_replay_rather_than_seal_nothing(hook):
    import os
    import subprocess

    from harvester.replay import _seal

    env = {**os.environ, _seal.HOOK_ENV: hook.lower()}
    done = subprocess.run([sys.executable, "-c", _VETOED], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "refused: the seal's audit hook is not called: another audit hook refused it"
