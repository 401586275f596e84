"""The seal where C code reaches out itself, past Python's socket module: libpq under psycopg, ctypes
calling the C library, a uvloop loop made directly. Each is refused naming its host, and the server on
the other side receives nothing; an allowed host is still reached; outside a replay nothing is checked."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import psycopg
import pytest

from harvester.case import AgentCase
from harvester.replay import _c_calls, replay
from tests.apps import grpc_app, leaky_app
from tests.builders.backends import Loopback, loopback, routes

BUILT = _c_calls._libc is not None and bool(_c_calls._libc.SUPPORTED)
# Linux, where harvester's C extension was built; .ci/run requires it (HARVESTER_REQUIRE_NATIVE=1)
pytestmark = pytest.mark.skipif(
    not BUILT and os.environ.get("HARVESTER_REQUIRE_NATIVE") != "1",
    reason="the C library's calls are sealed on Linux, where harvester's C extension was built",
)


def refund_case() -> AgentCase:
    return AgentCase.model_validate(
        {
            "id": "refund",
            "status": "accepted",
            "prompt": "Refund order A1001",
            "why": "refunds go through the payments service",
            "recorded": {"trajectory": ["issue_refund"], "stop": "answered"},
        }
    )


def sealed_detail(report) -> str:  # type: ignore[no-untyped-def]
    (result,) = report.results
    (check,) = [c for c in result.checks if c.name == "sealed"]
    assert check.passed is False and result.passed is False
    return check.detail or ""


@pytest.fixture
def payments(monkeypatch: pytest.MonkeyPatch) -> Iterator[Loopback]:
    with loopback(routes({"/refund": {"refunded": "A1001"}})) as server:
        monkeypatch.setenv(leaky_app.URL_ENV, f"{server.origin}/refund")
        yield server


@pytest.fixture
def ledger(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A database with an empty ``refunds`` table, which the refund tool writes to through libpq."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE refunds (order_id text)")
    monkeypatch.setenv(leaky_app.URL_ENV, postgres_url)
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "psycopg")
    return postgres_url


def refunds(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM refunds").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("client", ["ctypes", "uvloop"])
def test_c_code_connecting_itself_is_refused_and_the_service_receives_nothing(payments, monkeypatch, client):
    monkeypatch.setenv(leaky_app.CLIENT_ENV, client)
    report = replay([refund_case()], leaky_app.build, timeout=30)
    assert payments.seen == []
    detail = sealed_detail(report)
    assert f"connect to 127.0.0.1:{payments.port} during issue_refund: not a model host" in detail
    assert "Permission denied" in (report.results[0].answer or "")  # the C call failed with EACCES
    assert _c_calls.sealed()


def test_a_database_write_through_libpq_is_refused_and_no_row_is_written(ledger, postgres_server):
    report = replay([refund_case()], leaky_app.build, timeout=30)
    detail = sealed_detail(report)
    assert f"connect to 127.0.0.1:{postgres_server.port} during issue_refund: not a model host" in detail
    assert refunds(ledger) == 0
    # outside the replay, libpq connects as ever: the check runs only while a sealed replay does
    assert leaky_app.issue_refund("A1001") == "written" and refunds(ledger) == 1


def test_a_host_the_case_may_reach_is_reached_through_libpq(ledger, postgres_server):
    report = replay([refund_case()], leaky_app.build, timeout=30, allow_hosts=[f"127.0.0.1:{postgres_server.port}"])
    (result,) = report.results
    assert not [c for c in result.checks if c.name == "sealed" and c.passed is False], result.checks
    assert "Refund: written" in (result.answer or "") and refunds(ledger) == 1


def test_a_name_libpq_looks_up_is_refused_at_its_lookup(ledger, postgres_server, monkeypatch):
    named = ledger.replace("127.0.0.1", "ledger.internal.invalid")
    monkeypatch.setenv(leaky_app.URL_ENV, named)
    report = replay([refund_case()], leaky_app.build, timeout=30)
    detail = sealed_detail(report)
    assert f"connect to ledger.internal.invalid:{postgres_server.port} during issue_refund" in detail
    assert refunds(ledger) == 0


def test_without_the_c_library_seal_the_same_write_goes_through(ledger, monkeypatch):
    """What the seal is here for: ``HARVESTER_SEAL_LIBC=0`` in a process of its own leaves libpq unchecked,
    and the row is written although the case is sealed."""
    import subprocess

    code = (
        "from tests.apps import grpc_app, leaky_app; from harvester.case import AgentCase;"
        "from harvester.replay import replay, _c_calls;"
        "case = AgentCase.model_validate({**grpc_app.CASE, 'recorded': {'trajectory': ['issue_refund']}});"
        "r = replay([case], leaky_app.build, timeout=30).results[0];"
        "print(_c_calls.sealed(), r.answer)"
    )
    env = {**os.environ, "HARVESTER_SEAL_LIBC": "0"}
    said = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert said.returncode == 0, said.stderr
    assert said.stdout.split() == ["False", "Refund:", "written"]
    assert refunds(ledger) == 1


def test_the_program_reads_a_postgresql_store_while_sealed(postgres_url, tmp_path):
    """``harvester shadow`` is sealed from its ``--agent`` import until it exits, and reads the store
    through libpq all along (the pool connects from threads of its own): the store's connections are
    harvester's own, never refused as the agent's."""
    import subprocess

    from harvester.store import TraceStore
    from tests.builders import shadow as traffic

    traffic.capture(tmp_path / "traces.db", traffic.serve_demo, traffic.demo_traffic(12))
    with TraceStore(str(tmp_path / "traces.db")) as src, TraceStore(postgres_url) as dst:
        for run in src.runs():
            dst.add(run)
    command = [sys.executable, "-m", "harvester", "shadow", "--agent", "harvester.demo.agent:build_widened"]
    said = subprocess.run(
        [*command, "--store", postgres_url, "--report", str(tmp_path / "s.json")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert said.returncode == 0, said.stderr[-2000:]
    assert "runs: 12 production runs shadowed" in said.stdout and "(sealed, model live)" in said.stdout
    assert "Permission denied" not in said.stderr


@pytest.fixture
def grpc_payments() -> Iterator[tuple[int, list[bytes]]]:
    with grpc_app.payments() as service:
        yield service


def test_grpc_s_c_core_is_refused_and_an_allowed_address_reached(grpc_payments):
    port, seen = grpc_payments
    case = AgentCase.model_validate(grpc_app.CASE)
    report = replay([case], grpc_app.build_for(f"127.0.0.1:{port}"), timeout=30)
    assert f"connect to 127.0.0.1:{port}: not a model host" in sealed_detail(report)
    assert seen == [] and "UNAVAILABLE" in (report.results[0].answer or "")
    report = replay([case], grpc_app.build_for(f"127.0.0.1:{port}"), timeout=30, allow_hosts=[f"127.0.0.1:{port}"])
    assert report.results[0].answer == "Refund: refunded" and seen == [b"A1001"]


def test_grpc_imported_under_the_seal_resolves_names_where_the_seal_sees_them():
    """gRPC's own resolver (c-ares) queries DNS from C past ``getaddrinfo``; the seal sets
    ``GRPC_DNS_RESOLVER=native`` for a gRPC imported after it, so a name is looked up where the seal
    remembers it, and ``allow_hosts`` by name holds."""
    import subprocess

    code = """
from harvester.case import AgentCase
from harvester.replay import replay
case = AgentCase.model_validate({"id": "c", "status": "accepted", "prompt": "p", "why": "w", "recorded": {}})
replay([case], lambda: (lambda prompt: "nothing"), timeout=30)  # the seal, installed
from tests.apps import grpc_app  # gRPC imported (its settings read) under the seal, as --agent imports it
case = AgentCase.model_validate(grpc_app.CASE)
with grpc_app.payments() as (port, seen):
    build = grpc_app.build_for(f"localhost:{port}")
    refused = replay([case], build, timeout=30).results[0]
    allowed = replay([case], build, timeout=30, allow_hosts=[f"localhost:{port}"]).results[0]
    print(refused.answer, "|", allowed.answer, "|", seen)
"""
    env = {k: v for k, v in os.environ.items() if k != "GRPC_DNS_RESOLVER"}
    said = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert said.returncode == 0, said.stderr[-2000:]
    assert said.stdout.strip() == "Refund failed: StatusCode.UNAVAILABLE | Refund: refunded | [b'A1001']"
