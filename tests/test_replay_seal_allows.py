"""What the seal lets through, as it must: a sealed replay that refuses what a case may do fails users'
cases for nothing. An async client reaching the case's model host by name, a child given the process's
own environment, harvester's and the caller's own work (a judge, a callback), code without a case's
context reaching a model host some case records, the machine's own name, and a Python named as the
user wrote it in ``allow_commands``."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator

import pytest

from harvester.case import AgentCase
from harvester.conventions._values import endpoint
from harvester.replay import replay
from harvester.report import Report
from tests.apps import leaky_app
from tests.builders.backends import Loopback, loopback, routes


@pytest.fixture
def payments(monkeypatch: pytest.MonkeyPatch) -> Iterator[Loopback]:
    with loopback(routes({"/refund": {"refunded": "A1001"}})) as server:
        monkeypatch.setenv(leaky_app.URL_ENV, f"http://localhost:{server.port}/refund")
        yield server


def refund_case(*hosts: str) -> AgentCase:
    recorded = {"trajectory": ["issue_refund"], "stop": "answered", "model_hosts": list(hosts)}
    return AgentCase.model_validate(
        {"id": "refund", "status": "accepted", "prompt": "Refund A1001", "recorded": recorded}
    )


def sealed(report: Report) -> list[str]:
    return [c.detail for r in report.results for c in r.checks if c.name == "sealed" and c.passed is False]


def test_an_async_client_reaches_the_model_host_it_names(payments, monkeypatch):
    """anyio (httpx's async transport: AsyncOpenAI, pydantic-ai) looks names up in bytes."""
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "httpx-async")
    report = replay([refund_case(f"localhost:{payments.port}")], leaky_app.build, timeout=30)
    assert sealed(report) == [] and len(payments.seen) == 1
    refused = replay([refund_case("api.openai.com")], leaky_app.build, timeout=30)
    assert f"connect to localhost:{payments.port} during issue_refund" in sealed(refused)[0]
    assert len(payments.seen) == 1


@pytest.mark.parametrize("client", ["environ", "posix-spawn-environ"])
def test_a_child_given_the_process_environment_runs_and_is_sealed(payments, monkeypatch, client):
    monkeypatch.setenv(leaky_app.CLIENT_ENV, client)
    report = replay([refund_case()], leaky_app.build, timeout=60, allow_commands=["python -c"])
    assert payments.seen == []
    (detail,) = sealed(report)
    assert f"connect to localhost:{payments.port} during process {sys.executable} -c" in detail


def test_an_environment_given_to_a_child_is_left_as_it_was(payments, monkeypatch):
    """The seal goes into the environment the child gets, never into the caller's mapping."""
    env = {"PATH": os.environ.get("PATH", "")}
    seen: list[int] = []

    def build():
        def agent(prompt: str) -> str:
            import subprocess

            seen.append(subprocess.run([sys.executable, "-c", "pass"], env=env, timeout=30).returncode)
            return "done"

        return agent

    replay([refund_case()], build, timeout=60, allow_commands=[f"{sys.executable} -c"])
    assert seen == [0] and env == {"PATH": os.environ.get("PATH", "")}


def test_a_judge_and_the_callers_callbacks_are_not_the_agent(payments, monkeypatch):
    """A judge function asks its model; ``on_case`` and ``progress`` report to a dashboard."""
    import urllib.request

    def post(*_: object) -> None:
        urllib.request.urlopen(urllib.request.Request(os.environ[leaky_app.URL_ENV], data=b"{}"), timeout=5).read()

    def judge(case, run):
        post()
        return True, "judged"

    def build():
        return lambda prompt: "no refund"

    report = replay([refund_case()], build, timeout=30, judge=judge, on_case=post, progress=post)
    assert len(payments.seen) == 3 and sealed(report) == [] and report.refused == 0


def test_a_thread_a_callback_leaves_behind_is_held_again(payments, monkeypatch):
    """``on_case`` is the caller's own work only while it runs: a worker thread it starts, used by a
    later case's agent, meets the seal."""
    import queue
    import threading
    import urllib.request

    jobs: queue.SimpleQueue[str] = queue.SimpleQueue()
    said: queue.SimpleQueue[str] = queue.SimpleQueue()

    def worker() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(jobs.get(), data=b"{}"), timeout=5).read()
            said.put("sent")
        except OSError as exc:
            said.put(str(exc))

    def on_case(done) -> None:
        if done.case.id == "first":
            threading.Thread(target=worker, daemon=True).start()

    def build():
        def agent(prompt: str) -> str:
            if prompt == "second":
                jobs.put(os.environ[leaky_app.URL_ENV])
                return said.get(timeout=10)
            return "first"

        return agent

    cases = [
        AgentCase.model_validate({"id": name, "status": "accepted", "prompt": name}) for name in ("first", "second")
    ]
    report = replay(cases, build, timeout=30, concurrency=1, on_case=on_case)
    assert payments.seen == []
    assert "harvester replay sealed connect to localhost" in (report.results[1].answer or "")


def test_code_without_a_case_reaches_a_model_host_a_case_records(payments, monkeypatch):
    """The app's worker thread (no case's context) is held to what any case may reach, model hosts too,
    as the processes the agent starts are."""
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "thread")
    report = replay([refund_case(f"localhost:{payments.port}")], leaky_app.build, timeout=30)
    assert sealed(report) == [] and len(payments.seen) == 1


def test_the_machines_own_name_and_numeric_lookups_pass_and_reverse_queries_do_not():
    answers: dict[str, str] = {}

    def build():
        def agent(prompt: str) -> str:
            socket.getaddrinfo("localhost", None)
            socket.getaddrinfo(socket.gethostname(), None)
            socket.gethostbyname("10.1.2.3")  # an address: no query
            socket.getnameinfo(("127.0.0.1", 80), 0)
            for name, ask in (
                ("getnameinfo", lambda: socket.getnameinfo(("10.1.2.3", 53), 0)),
                ("gethostbyaddr", lambda: socket.gethostbyaddr("10.1.2.3")),
            ):
                try:
                    ask()
                    answers[name] = "asked"
                except PermissionError as exc:
                    answers[name] = str(exc)
            return "done"

        return agent

    report = replay([refund_case()], build, timeout=30)
    assert answers == dict.fromkeys(("getnameinfo", "gethostbyaddr"), answers["gethostbyaddr"])
    assert answers["gethostbyaddr"].startswith("harvester replay sealed look up 10.1.2.3")
    assert [d for d in sealed(report) if "localhost" in d or "10.1.2.3" not in d] == []


def test_a_recorded_endpoint_is_kept_as_a_host_the_seal_reads():
    """A span's ``server.address`` written as a URL, with a trailing dot, or international, is still its
    host; one that is no host at all is none (the provider's documented hosts stand in) rather than a
    ``model_hosts`` entry that breaks harvest."""
    assert endpoint("https://api.openai.com/v1", None) == "api.openai.com"
    assert endpoint("http://localhost:11434", None) == "localhost:11434"
    assert endpoint("api.openai.com.", 443) == "api.openai.com:443"
    assert endpoint("bücher.example", None) == "xn--bcher-kva.example"
    assert endpoint("::1", 8000) == "[::1]:8000"
    assert endpoint("not a host", None) is None
