"""The seal where C code reaches out itself, past Python's socket module: libpq under psycopg, ctypes
calling the C library, a uvloop loop made directly. Each is refused naming its host, and the server on
the other side receives nothing; an allowed host is still reached; outside a replay nothing is checked."""

from __future__ import annotations

import os
import re
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


def test_localhost_allowed_lets_c_code_reach_the_loopback_address_it_never_looked_up(payments, monkeypatch):
    """libcurl answers ``localhost`` itself, asking no resolver, then connects to ``::1`` or 127.0.0.1:
    ``localhost:PORT`` allowed is the loopback addresses at that port."""
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "ctypes")
    report = replay([refund_case()], leaky_app.build, timeout=30, allow_hosts=[f"localhost:{payments.port}"])
    (result,) = report.results
    assert not [c for c in result.checks if c.name == "sealed" and c.passed is False], result.checks
    assert len(payments.seen) == 1


def test_c_code_in_a_python_child_is_refused_there_and_fails_the_case(payments, monkeypatch):
    """A Python child the agent starts (an MCP server, a worker) seals itself, its C code's calls too."""
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "child-ctypes")
    report = replay([refund_case()], leaky_app.build, timeout=60, allow_commands=[sys.executable])
    assert payments.seen == []
    assert f"connect to 127.0.0.1:{payments.port} during process" in sealed_detail(report)


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
        "print(_c_calls.sealed(), r.answer); print(r.notes)"
    )
    env = {**os.environ, "HARVESTER_SEAL_LIBC": "0"}
    said = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert said.returncode == 0, said.stderr
    said_line, notes = said.stdout.splitlines()
    assert said_line.split() == ["False", "Refund:", "written"]
    assert "HARVESTER_SEAL_LIBC=0: connections C code made itself (libpq, libcurl, gRPC, ctypes)" in notes
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


_NEEDS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="a raw socket needs root")


def _c_way(how: str, port: int) -> str:
    """What C code does to reach 127.0.0.1:``port`` (UDP) or a name, past ``connect``: each call through
    ctypes (or cffi), as a C library would make it."""
    import ctypes
    import socket
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    v4 = struct.pack("=H", socket.AF_INET) + struct.pack("!H", port) + socket.inet_aton("127.0.0.1") + bytes(8)
    if how in ("sendmmsg", "sendto-unspec"):
        fd = libc.socket(socket.AF_INET, socket.SOCK_DGRAM, 0)
        try:
            if how == "sendto-unspec":  # family 0: Linux sends it as IPv4
                address = struct.pack("=H", 0) + v4[2:]
                sent = libc.sendto(fd, b"refund A1001", 12, 0, address, len(address))
            else:

                class Iovec(ctypes.Structure):
                    _fields_ = [("base", ctypes.c_char_p), ("len", ctypes.c_size_t)]

                class Msghdr(ctypes.Structure):
                    _fields_ = [
                        ("name", ctypes.c_char_p),
                        ("namelen", ctypes.c_uint32),
                        ("iov", ctypes.POINTER(Iovec)),
                        ("iovlen", ctypes.c_size_t),
                        ("control", ctypes.c_void_p),
                        ("controllen", ctypes.c_size_t),
                        ("flags", ctypes.c_int),
                    ]

                class Mmsghdr(ctypes.Structure):
                    _fields_ = [("hdr", Msghdr), ("len", ctypes.c_uint)]

                iov = Iovec(b"refund A1001", 12)
                message = Mmsghdr(Msghdr(v4, len(v4), ctypes.pointer(iov), 1, None, 0, 0), 0)
                sent = libc.sendmmsg(fd, ctypes.byref(message), 1, 0)
        finally:
            libc.close(fd)
    elif how == "raw-port0":  # a raw socket: the port is in the packet, the address's port is 0
        fd = libc.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
        payload = b"refund A1001"
        packet = struct.pack("!HHHH", 40000, port, 8 + len(payload), 0) + payload
        nowhere = v4[:2] + bytes(2) + v4[4:]
        sent = libc.sendto(fd, packet, len(packet), 0, nowhere, len(nowhere))
        libc.close(fd)
    elif how == "connect-ipv6-24":  # RFC 2133's sockaddr_in6, without the scope: 24 bytes
        fd = libc.socket(socket.AF_INET6, socket.SOCK_STREAM, 0)
        address = (
            struct.pack("=H", socket.AF_INET6) + struct.pack("!HI", port, 0) + socket.inet_pton(socket.AF_INET6, "::1")
        )
        sent = libc.connect(fd, address, len(address))
        libc.close(fd)
    elif how == "cffi":
        import cffi

        ffi = cffi.FFI()
        ffi.cdef("int socket(int, int, int); int connect(int, const void *, unsigned int); int close(int);")
        c = ffi.dlopen(None)
        fd = c.socket(socket.AF_INET, socket.SOCK_DGRAM, 0)
        sent = c.connect(fd, v4, len(v4))
        c.close(fd)
    elif how == "gethostbyname":
        libc.gethostbyname.restype = ctypes.c_void_p
        sent = 0 if libc.gethostbyname(b"payments.internal.invalid") else -1
    else:  # res_query: a DNS query of the C library's resolver (an SRV record, as a database driver asks)
        answer = ctypes.create_string_buffer(512)
        name = b"1.2.3.4" if how == "res_query-address" else b"_payments._tcp.internal.invalid"
        sent = libc.res_query(name, 1, 33, answer, 512)  # a query, even of a name that reads as an address
    if sent < 0:
        raise OSError(ctypes.get_errno(), f"{how} failed")
    return f"{how}: sent"


@pytest.mark.parametrize(
    ("how", "refused"),
    [
        ("sendmmsg", "127.0.0.1:PORT"),
        ("sendto-unspec", "127.0.0.1:PORT"),
        pytest.param("raw-port0", ":0", marks=_NEEDS_ROOT),  # by a name 127.0.0.1 was looked up by, if one
        ("connect-ipv6-24", "[::1]:PORT"),
        ("cffi", "127.0.0.1:PORT"),
        ("gethostbyname", "payments.internal.invalid"),
        ("res_query", "_payments._tcp.internal.invalid"),
        ("res_query-address", "1.2.3.4."),
    ],
)
def test_c_calls_past_connect_are_refused_and_nothing_arrives(how, refused):
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.3)
        port = listener.getsockname()[1]

        def build():  # type: ignore[no-untyped-def]
            def agent(prompt: str) -> str:
                try:
                    return _c_way(how, port)
                except OSError as exc:
                    return f"failed: {exc}"

            return agent

        report = replay([AgentCase.model_validate(grpc_app.CASE)], build, timeout=30)
        detail = sealed_detail(report)
        assert f"connect to {refused.replace('PORT', str(port))}" in detail or f"{refused}: not a model host" in detail
        with pytest.raises(TimeoutError):
            listener.recv(100)  # nothing arrived


def test_a_name_stays_remembered_when_its_address_is_looked_up_again(ledger, postgres_server):
    """psycopg looks the URL's name up in Python, then hands libpq the address, which libpq looks up
    again: the address must keep the name, or a database allowed by its name is refused by its address."""
    import socket

    from harvester.replay import _guard

    named = ledger.replace("127.0.0.1", "localhost")
    replay([refund_case()], lambda: lambda p: "x", timeout=30)  # the seal, installed
    socket.getaddrinfo("localhost", postgres_server.port)
    socket.getaddrinfo("127.0.0.1", postgres_server.port)
    assert _guard.resolved[("127.0.0.1", postgres_server.port)] == "localhost"
    os.environ[leaky_app.URL_ENV] = named
    report = replay([refund_case()], leaky_app.build, timeout=30, allow_hosts=[f"localhost:{postgres_server.port}"])
    (result,) = report.results
    assert not [c for c in result.checks if c.name == "sealed" and c.passed is False], result.checks
    assert "Refund: written" in (result.answer or "") and refunds(ledger) == 1


def test_a_database_the_agent_module_connects_to_at_import_is_one_line_naming_the_refusal(
    ledger, postgres_server, monkeypatch, tmp_path
):
    """libpq's own words for a refused connection are "Permission denied ... Is the server running?":
    the error line says it was the seal, and how to allow it."""
    from click.testing import CliRunner

    from harvester.case import save_case
    from harvester.cli import main
    from tests.builders.cli import one_line_error

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "pyproject.toml").write_text("[tool.harvester]\n")
    (tmp_path / "ledger_at_import.py").write_text(
        "import os\nimport psycopg\n\n_conn = psycopg.connect(os.environ['LEAKY_URL'], connect_timeout=5)\n\n\n"
        "def build():\n    return lambda prompt: 'ok'\n"
    )
    save_case(refund_case(), tmp_path / "cases")
    result = CliRunner().invoke(main, ["replay", "--agent", "ledger_at_import:build"])
    port = postgres_server.port
    line = one_line_error(result, "cannot import ledger_at_import", "Permission denied", "the seal refused connect to ")
    # named by the name this process last looked the address up by, if one did (another test: localhost)
    assert re.search(rf"the seal refused connect to (127\.0\.0\.1|localhost):{port}: not a model host", line), line
    assert "allow it with replay.allow_hosts" in line


def test_a_name_that_starts_like_a_loopback_address_is_not_one():
    """``localhost:PORT`` allowed is the loopback addresses at that port, not a name such as
    ``127.evil.example`` given to ``connect`` (which looks it up and goes wherever it points)."""
    import socket

    from harvester.replay import _guard
    from harvester.replay._policy import Policy

    refused: list[str] = []

    def refuse(what: str, target: str, why: str) -> None:
        refused.append(target)

    policy = Policy(["localhost:8080"], ())
    sock = _guard.CSocket(int(socket.AF_INET), -1)
    for host in ("127.0.0.1", "::1", "127.evil.example", "127.0.0.1.evil.example"):
        _guard._reach(policy, refuse, (sock, (host, 8080)))
    assert refused == ["127.evil.example:8080", "127.0.0.1.evil.example:8080"]
